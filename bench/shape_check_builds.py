"""What the shape check's model constructions cost on the host, per KernelBench problem.

The shape check (engine/integrity/runtime.py shape_findings) builds the task's Model, and the candidate, again
at its smaller sizes. That construction is host work (weight initialisation on the CPU) and now runs without
the worker's read hold (engine/worker/gpu_share.py off_the_gpu); before, it held waiting timed windows back.
This bench times `Model(*get_init_inputs())` at the shape check's sizes for every problem, on the CPU, one
thread (as in a worker beside seven others), so a change that makes it cost more, or puts it back under a
hold, has a figure to compare with. No GPU is needed.

    python bench/shape_check_builds.py [KERNELBENCH_DIR] [--top 10] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Build:
    problem: str
    seconds: float  # Model(*init) at the shape check's sizes
    parameters: int
    note: str = ""  # why it was not built (no size constants, the task fails at those sizes)


def measure(path: Path, root: Path) -> Build:
    import torch
    from cudaforge.engine.integrity.runtime import load_variant, size_constants, smaller_size

    name = str(path.relative_to(root).with_suffix(""))
    source = path.read_text(encoding="utf-8")
    try:
        task = load_variant(source, str(path), {})
        constants = size_constants(task, source)
        if not constants:
            return Build(name, 0.0, 0, "no size constants: the shape check is skipped")
        variant = load_variant(source, str(path), {k: smaller_size(v) for k, v in constants.items()})
        init = list(variant.get_init_inputs())
        torch.manual_seed(0)
        started = time.perf_counter()
        model = variant.Model(*init)
        seconds = time.perf_counter() - started
        return Build(name, round(seconds, 4), sum(p.numel() for p in model.parameters()))
    except Exception as exc:  # the task does not build at the smaller sizes: the check says so itself
        return Build(name, 0.0, 0, f"{type(exc).__name__}: {str(exc)[:80]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernelbench", nargs="?", default=str(REPO.parent / "shared" / "kernelbench"))
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    root = Path(args.kernelbench)
    problems = sorted(root.glob("level*/*.py"))
    if not problems:
        print(f"shape_check_builds: no level*/*.py under {root}", file=sys.stderr)
        return 2
    import warnings

    import torch

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    builds = [measure(p, root) for p in problems]
    builds.sort(key=lambda b: -b.seconds)
    total = sum(b.seconds for b in builds)
    built = [b for b in builds if not b.note]
    print(f"{len(built)} of {len(builds)} problems built at the shape check's sizes: {total:.2f} s in all "
          f"(torch {torch.__version__}, one CPU thread)")
    print("| problem | seconds | parameters |")
    print("| --- | --- | --- |")
    for b in builds[:args.top]:
        print(f"| {b.problem} | {b.seconds:.3f} | {b.parameters:,} |")
    if args.json:
        args.json.write_text(json.dumps({"total_s": round(total, 3), "builds": [asdict(b) for b in builds]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
