"""Speed of light on the GPU: `sol_fraction` for every example's nvrtc candidate and for the first N
KernelBench level-1 problems (each with its own reference as the candidate), and what would be held.

Usage: python bench/speed_of_light.py [--kernelbench ../shared/kernelbench] [--first 20] [--parallel 8] [--json OUT.json]
Prints one markdown table: bytes, FLOPs, the byte and FLOP floors, the bound, the candidate's median,
sol_fraction and the hold reasons under the default [hold] settings. The references as candidates fail
`no_custom_kernel` (they are PyTorch): their timing and speed of light are still recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_KB = REPO.parent / "shared" / "kernelbench"


def jobs(kernelbench: Path, first: int, start: int = 1, examples: bool = True) -> list[tuple[str, Path, Path | None]]:
    """(name, task, candidate file or None for the reference as its own candidate): the examples' nvrtc
    candidates, then level-1 problems `start`..`first` (by their numbers)."""
    out: list[tuple[str, Path, Path | None]] = [
        (f"examples/{t.parent.name}", t, t.parent / "nvrtc.py")
        for t in sorted((REPO / "examples").glob("*/task.py")) if (t.parent / "nvrtc.py").exists()] if examples else []
    level1 = kernelbench / "level1"
    if level1.is_dir():
        files = [p for p in sorted(level1.glob("*.py"), key=lambda p: (int(p.stem.split("_")[0]), p.name))
                 if start <= int(p.stem.split("_")[0]) <= first]
        out += [(f"level1/{p.stem}", p, None) for p in files]
    else:
        print(f"{level1}: not found, KernelBench skipped", file=sys.stderr)
    return out


def row(name: str, r: Any, hold: Any, wall_s: float) -> dict[str, Any]:
    from cudaforge.engine.hold import hold_reasons

    s = r.speed_of_light
    t = r.timing
    return {"name": name, "outcome": r.outcome, "speedup": r.speedup, "wall_s": round(wall_s, 1),
            "candidate_us": t.candidate.median_ms * 1e3 if t else None,
            "bytes": s.bytes if s else None, "flops": s.flops if s else None,
            "byte_floor_us": s.byte_floor_ms * 1e3 if s and s.byte_floor_ms is not None else None,
            "flop_floor_us": s.flop_floor_ms * 1e3 if s and s.flop_floor_ms is not None else None,
            "peak": s.peak if s else "", "bound": s.bound if s else "",
            "sol_fraction": s.sol_fraction if s else None, "note": s.note if s else "",
            # the CUPTI kernel-time timer beside the events (events / busy: ~1 where launch gaps are negligible)
            "cupti_us": t.kernel_candidate.median_ms * 1e3 if t and t.kernel_candidate else None,
            "findings": [f"{f.severity}:{f.name}" for f in r.findings],
            "hold": [h.kind for h in hold_reasons(r, hold, new_best=False)],  # accepted results only
            "phases": {k: round(v, 3) for k, v in (r.phases or {}).items()}}  # where the evaluation's time went


def cupti(r: dict[str, Any]) -> str:
    if not r.get("cupti_us") or not r.get("candidate_us"):
        return "—"
    return f"{r['cupti_us']:.1f} ({r['candidate_us'] / r['cupti_us']:.3f})"


def table(rows: list[dict[str, Any]]) -> str:
    def f(v: Any, p: int = 1) -> str:
        return "—" if v is None else f"{v:.{p}f}"

    out = ["| problem | outcome | candidate µs | MB moved | GFLOP | byte floor µs | FLOP floor µs (peak) | bound | "
           "sol_fraction | CUPTI busy µs (events / busy) | hold (default [hold]) |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mb = f(r["bytes"] / 1e6, 2) if r["bytes"] is not None else "—"
        gf = f(r["flops"] / 1e9, 3) if r["flops"] is not None else "—"
        out.append(f"| {r['name']} | {r['outcome']} | {f(r['candidate_us'])} | {mb} | {gf} | {f(r['byte_floor_us'], 2)} | "
                   f"{f(r['flop_floor_us'], 2)} ({r['peak'] or '—'}) | {r['bound'] or '—'} | "
                   f"{'—' if r['sol_fraction'] is None else format(r['sol_fraction'], '.1%')} | "
                   f"{cupti(r)} | {', '.join(r['hold']) or '—'} |")
    return "\n".join(out)


def top_phases(phases: dict[str, float], n: int = 6) -> str:
    """The evaluation's largest steps (sub-phases included), for the progress line."""
    return " ".join(f"{k}={v:.1f}" for k, v in sorted(phases.items(), key=lambda kv: -kv[1])[:n])


async def run(kernelbench: Path, first: int, parallel: int = 1, rows_path: Path | None = None,
              start: int = 1, examples: bool = True) -> list[dict[str, Any]]:
    """The examples one at a time (their events against CUPTI's busy time with no other evaluation's
    launches beside them), then the KernelBench problems through `parallel` evaluators side by side
    (their timed windows still hold the GPU alone, engine/gpu/rwlock.py); rows in the jobs' order."""
    from cudaforge.engine.candidate import Candidate, load_candidate
    from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator
    from cudaforge.engine.gpu.specs import gpu_spec_for_device
    from cudaforge.engine.hold import HoldSettings
    from cudaforge.engine.speed_of_light import peaks_from_spec
    from cudaforge.engine.task import load_task

    spec = gpu_spec_for_device(0)
    print(f"GPU spec: {getattr(spec, 'name', None)}", file=sys.stderr)
    options = EvalOptions(device="cuda", trials=3, peak_bandwidth_gbs=getattr(spec, "dram_bandwidth_gbs", None),
                          peaks=peaks_from_spec(spec),
                          timing={"warmup": 10, "warmup_ms": 25.0, "trials": 50, "min_time_ms": 100.0,
                                  "max_trials": 1000, "host_trials": 20, "l2_flush": True, "baselines": ["eager"]})
    todo = list(enumerate(jobs(kernelbench, first, start, examples)))
    done: dict[int, dict[str, Any]] = {}

    async def slot() -> None:
        evaluator = Evaluator(options)
        try:
            while todo:
                index, (name, task_path, cand_path) = todo.pop(0)
                task = load_task(task_path)
                cand = load_candidate(cand_path) if cand_path else Candidate(
                    source=re.sub(r"\bModel\b", "ModelNew", task.source), format="python")
                start = time.perf_counter()
                r = await evaluator.evaluate(task, cand, use_cache=False)
                done[index] = row(name, r, HoldSettings(), time.perf_counter() - start)
                sol = done[index]["sol_fraction"]
                print(f"{name:50s} {r.outcome:18s} sol {'—' if sol is None else f'{sol:.1%}'} "
                      f"{cupti(done[index])} wall {done[index]['wall_s']} s: {top_phases(done[index]['phases'])}",
                      file=sys.stderr, flush=True)
                if rows_path is not None:  # a run cut short still leaves its rows
                    with rows_path.open("a", encoding="utf-8") as out:
                        out.write(json.dumps(done[index]) + "\n")
        finally:
            await evaluator.aclose()

    kernelbench_jobs = [j for j in todo if j[1][2] is None]
    todo[:] = [j for j in todo if j[1][2] is not None]
    await slot()  # the examples, alone
    todo[:] = kernelbench_jobs
    await asyncio.gather(*(slot() for _ in range(max(1, parallel))))
    return [done[i] for i in sorted(done)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernelbench", default=str(DEFAULT_KB))
    ap.add_argument("--first", type=int, default=20, help="the last level-1 problem (by number)")
    ap.add_argument("--start", type=int, default=1, help="the first level-1 problem (by number)")
    ap.add_argument("--no-examples", action="store_true", help="KernelBench problems only")
    ap.add_argument("--parallel", type=int, default=1, help="evaluations in flight (timed windows stay exclusive)")
    ap.add_argument("--json")
    ap.add_argument("--rows", help="append one JSON line per evaluation here as it finishes")
    args = ap.parse_args()
    start = time.perf_counter()
    rows = asyncio.run(run(Path(args.kernelbench), args.first, args.parallel,
                           Path(args.rows) if args.rows else None, args.start, not args.no_examples))
    print(table(rows))
    print(f"\n{len(rows)} evaluations in {time.perf_counter() - start:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
