"""Measure each KernelBench problem's reference time on the CPU (one input draw + one forward) and
write the fastest N.

Only problems whose footprint (inputs + outputs + parameters, meta device) is under --max-mb are
run (a level-1 problem with 4 GiB inputs would take minutes on a CPU). The list this writes,
bench/kernelbench_cpu20.txt, is the CPU subset that CI sweeps (tests/test_kernelbench.py).

    python bench/kernelbench_cpu_times.py --write bench/kernelbench_cpu20.txt
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDER = REPO.parent / "shared" / "kernelbench"


def main(argv: list[str] | None = None) -> int:
    import torch
    from cudaforge.engine.worker.memory import meta_footprint

    ap = argparse.ArgumentParser()
    ap.add_argument("folder", nargs="?", default=str(FOLDER))
    ap.add_argument("--max-mb", type=float, default=600.0)
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--write", help="write the fastest --count problems here")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    times: list[tuple[float, str]] = []
    for path in sorted(Path(args.folder).glob("level*/*.py")):
        name = f"{path.parent.name}/{path.name}"
        try:
            spec = importlib.util.spec_from_file_location(f"kb_{path.parent.name}_{path.stem}", path)
            mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            spec.loader.exec_module(mod)  # type: ignore[union-attr]
            init = mod.get_init_inputs()
            fp = meta_footprint(mod, list(init), 42)
            if fp["reason"] or fp["footprint_bytes"] > args.max_mb * 2**20:
                continue
            torch.manual_seed(42)
            model = mod.Model(*init).eval()
            took = 0.0
            for _ in range(2):  # the second call, once warm (slow ones are out of the running anyway)
                start = time.perf_counter()
                inputs = mod.get_inputs()  # an evaluation draws inputs as often as it calls the reference
                with torch.no_grad():
                    model(*inputs)
                took = time.perf_counter() - start
                if took > 1.0:
                    break
        except Exception as exc:
            print(f"skip {name}: {type(exc).__name__}: {str(exc)[:80]}", file=sys.stderr)
            continue
        times.append((took, name))
        print(f"{took * 1e3:9.3f} ms  {name}", flush=True)
    times.sort()
    chosen = [n for _, n in times[:args.count]]
    if args.write:
        Path(args.write).write_text("# the KernelBench problems with the smallest CPU reference time "
                                    "(bench/kernelbench_cpu_times.py)\n" + "\n".join(chosen) + "\n")
    print("\n".join(f"{t * 1e3:9.3f} ms  {n}" for t, n in times[:args.count]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
