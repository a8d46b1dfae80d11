"""Evaluate every example in every CUDA format on the local GPU and print a table (markdown).

Usage: python bench/gpu_examples.py [--formats nvrtc,inline] [--json OUT.json] [--parallel N]
Builds run in parallel (up to --parallel workers); GPU phases are serialized by the per-GPU lock,
so every timing is taken alone on the GPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from cudaforge.engine.candidate import load_candidate
from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator
from cudaforge.engine.task import load_task

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


async def run_all(formats: list[str], parallel: int, options: EvalOptions) -> list[dict]:
    sem = asyncio.Semaphore(parallel)
    jobs = []
    for task_path in sorted(EXAMPLES.glob("*/task.py")):
        for fmt in formats:
            cand = task_path.parent / f"{fmt}.py"
            if cand.exists():
                jobs.append((task_path, cand, fmt))

    async def one(task_path: Path, cand: Path, fmt: str) -> dict:
        async with sem:
            start = time.perf_counter()
            r = await Evaluator(options).evaluate(load_task(task_path), load_candidate(cand))
            wall = time.perf_counter() - start
        t = r.timing
        row = {
            "task": task_path.parent.name, "format": fmt, "outcome": r.outcome,
            "compile_s": r.compile.seconds if r.compile else None,
            "cached": r.compile.cached if r.compile else None,
            "correct": bool(r.correctness and r.correctness.passed),
            "max_abs_err": max((o.max_abs_err for o in r.correctness.outputs), default=None) if r.correctness else None,
            "ref_us": t.reference.median_ms * 1e3 if t else None,
            "cand_us": t.candidate.median_ms * 1e3 if t else None,
            "cand_iqr_us": t.candidate.iqr_ms * 1e3 if t else None,
            # The CUPTI kernel-time timer beside the events (events / busy: ~1 for an honest kernel, #23)
            "cupti_ref_us": t.kernel_reference.median_ms * 1e3 if t and t.kernel_reference else None,
            "cupti_cand_us": t.kernel_candidate.median_ms * 1e3 if t and t.kernel_candidate else None,
            "kernel_timer": t.kernel_timer if t else "",
            "speedup": t.speedup if t else None,
            "spread": [t.speedup_low, t.speedup_high] if t else None,
            "findings": [f"{f.severity}:{f.name}" for f in r.findings],
            "message": r.message, "wall_s": wall, "phases": r.phases,
        }
        print(f"{row['task']:14s} {fmt:7s} {r.outcome:16s} {r.message[:100]}", file=sys.stderr, flush=True)
        return row

    return await asyncio.gather(*(one(*j) for j in jobs))


def table(rows: list[dict]) -> str:
    out = ["| task | format | outcome | compile s | correct | max abs err | eager µs | candidate µs (IQR) | CUPTI busy µs (events / busy) | speedup (spread) | findings |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        f = lambda v, p=1: "—" if v is None else f"{v:.{p}f}"  # noqa: E731
        spread = f"{r['speedup']:.2f}× ({r['spread'][0]:.2f}–{r['spread'][1]:.2f})" if r["speedup"] else "—"
        cupti = (f"{r['cupti_cand_us']:.1f} ({r['cand_us'] / r['cupti_cand_us']:.3f})" if r["cupti_cand_us"] and r["cand_us"]
                 else r["kernel_timer"] or "—")
        out.append(f"| {r['task']} | {r['format']} | {r['outcome']} | {f(r['compile_s'], 2)}{' (cached)' if r['cached'] else ''} | "
                   f"{'yes' if r['correct'] else 'no'} | {'—' if r['max_abs_err'] is None else format(r['max_abs_err'], '.1e')} | "
                   f"{f(r['ref_us'])} | {f(r['cand_us'])} ({f(r['cand_iqr_us'])}) | {cupti} | {spread} | "
                   f"{', '.join(r['findings']) or '—'} |")
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--formats", default="nvrtc,inline")
    p.add_argument("--json")
    p.add_argument("--parallel", type=int, default=8)
    p.add_argument("--trials", type=int, default=50)
    args = p.parse_args()
    from cudaforge.engine.gpu.specs import gpu_spec_for_device

    prof = gpu_spec_for_device(0)
    bw = getattr(prof, "dram_bandwidth_gbs", None) if prof else None
    options = EvalOptions(device="cuda", trials=5, peak_bandwidth_gbs=bw,
                          timing={"warmup": 10, "trials": args.trials, "host_trials": 20, "l2_flush": True,
                                  "baselines": ["eager"]})
    start = time.perf_counter()
    rows = asyncio.run(run_all(args.formats.split(","), args.parallel, options))
    print(table(rows))
    print(f"\n{len(rows)} evaluations in {time.perf_counter() - start:.0f} s wall (builds in parallel, GPU phases serialized)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
