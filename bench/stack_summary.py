"""Sum the workers' stack samples (CUDAFORGE_STACK_SAMPLES, engine/worker/stack_samples.py) over a run.

    python bench/stack_summary.py FOLDER [--hold write] [--step timing] [--top 10]

Prints, per (step, hold) matching the filters, the sampled seconds over all workers and the most
frequent stacks: what the processes were doing while, say, they held the GPU alone. The last line sums the
seconds held alone and, of the kept stacks, those spent importing a module (an import in a timed window
holds the GPU alone with the GPU idle: 1.8 s per cuDNN problem until 2026-12-04).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("--hold", default="", help="only this hold kind (write, read, none)")
    ap.add_argument("--step", default="", help="only steps starting with this")
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args(argv)
    files = sorted(Path(args.folder).glob("stacks-*.json"))
    if not files:
        print(f"no stacks-*.json in {args.folder}", file=sys.stderr)
        return 1
    seconds: collections.Counter[tuple[str, str]] = collections.Counter()
    stacks: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for f in files:
        for g in json.loads(f.read_text())["groups"]:
            if (args.hold and g["hold"] != args.hold) or not g["step"].startswith(args.step):
                continue
            key = (g["step"], g["hold"])
            seconds[key] += g["seconds"]
            for s in g["stacks"]:
                stacks[key][s["stack"]] += s["seconds"]
    imports = sum(t for key, c in stacks.items() if key[1] == "write"
                  for stack, t in c.items() if "import:" in stack)
    print(f"{len(files)} workers")
    for key, s in seconds.most_common(args.top):
        print(f"{s:8.2f} s  {key[0]}  [{key[1]}]")
        for stack, t in stacks[key].most_common(3):
            print(f"    {t:7.2f}  {stack[:300]}")
    held = sum(t for key, t in seconds.items() if key[1] == "write")
    # Last: the line bench/gpu_check.sh's window-stacks step reports (stacks kept per step: at least this much).
    print(f"held alone {held:.2f} s, importing while held alone {imports:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
