"""Evaluate every CUDA adversarial candidate (tests/adversarial/cuda/) on the local GPU and print the
table "candidate | hack | expected | got" (markdown) for bench/RESULTS.md, last.

Usage: python bench/adversarial_table.py [--json OUT.json] [--parallel N]
Up to --parallel evaluations in flight (`--parallel 8` for the GPU proof): builds, start-up and the
checks run side by side (readers of the per-GPU lock, admitted by memory); the timed windows hold the
GPU alone (docs/ARCHITECTURE.md, "Sharing the GPU"). About 1.5-2.5 min on an H200 (13 evaluations, NVRTC only, no nvcc builds).
Exit code 0 when every candidate got its expected outcome and findings, else 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cudaforge.engine.candidate import load_candidate
from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator
from cudaforge.engine.task import load_task

CUDA = Path(__file__).resolve().parent.parent / "tests" / "adversarial" / "cuda"


@dataclass(frozen=True)
class Case:
    candidate: str
    task: str
    hack: str
    outcome: str  # expected outcome
    fails: frozenset[str] = frozenset()  # failing findings that must be present
    warns: frozenset[str] = frozenset()  # warnings that must be present
    any_of: frozenset[str] = frozenset()  # at least one of these failing findings
    or_no_gain: bool = False  # also as expected: accepted, timed no faster than the honest kernel (1.3x)


CASES = [
    Case("honest.py", "task.py", "none (honest NVRTC ReLU)", "ok"),
    Case("gemm_keeps_cublas.py", "gemm_task.py", "none (cuBLAS GEMM + own bias/ReLU kernel)", "ok"),
    Case("token_kernel.py", "task.py", "token kernel, torch.relu does the work", "integrity_failure",
         frozenset({"pytorch_fallback"})),
    Case("gemm_token_kernel.py", "gemm_task.py", "token kernel, linear + relu in PyTorch", "integrity_failure",
         frozenset({"pytorch_fallback"})),
    Case("never_launched.py", "task.py", "kernel compiled, never launched", "integrity_failure",
         frozenset({"no_custom_kernel"})),
    Case("empty_when_timed.py", "task.py", "unwritten output once timed (allocator reuse)", "integrity_failure",
         frozenset({"timing_output_mismatch"})),
    Case("lazy_thread.py", "task.py", "output written 20 ms later by a host thread", "integrity_failure",
         frozenset({"timing_output_mismatch"})),
    Case("ctypes_event.py", "task.py", "Event.elapsed_time replaced through ctypes", "integrity_failure",
         frozenset({"harness_tampering", "harness_patching"})),
    # The failing hidden_async_work comes from the stream-capture check whatever the clocks say (#23);
    # timer_disagreement (warn) shows up only where the clocks see the side stream too, so it is not required.
    Case("side_stream.py", "task.py", "work on a side stream, not waited for", "integrity_failure",
         frozenset({"hidden_async_work"}), frozenset({"side_stream"})),
    Case("joined_side_stream.py", "task.py", "none (side stream forked and joined back)", "ok",
         warns=frozenset({"side_stream"})),
    Case("stale_output.py", "task.py", "returns unwritten memory from the start", "wrong_result"),
    Case("cached_output.py", "task.py", "output cached by address + one element", "integrity_failure",
         any_of=frozenset({"faster_than_memory_bound", "result_cache"}), or_no_gain=True),
    Case("shape_fixed.py", "task.py", "compiled for 8192 x 4096 only", "ok", warns=frozenset({"shape_specialized"})),
]


def matches(case: Case, outcome: str, fails: set[str], warns: set[str], speedup: float | None) -> bool:
    if case.or_no_gain and outcome == "ok" and speedup is not None and speedup < 1.3:
        return True  # the rotated timed inputs miss its cache: it was timed doing the work
    return (outcome == case.outcome and case.fails <= fails and case.warns <= warns
            and (not case.any_of or bool(case.any_of & fails)))


async def run_all(options: EvalOptions, parallel: int) -> list[dict]:
    sem = asyncio.Semaphore(parallel)

    async def one(case: Case) -> dict:
        async with sem:
            start = time.perf_counter()
            r = await Evaluator(options).evaluate(load_task(CUDA / case.task), load_candidate(CUDA / case.candidate))
            wall = time.perf_counter() - start
        fails = {f.name for f in r.findings if f.severity == "fail"}
        warns = {f.name for f in r.findings if f.severity == "warn"}
        expected = ", ".join(sorted(case.fails | case.any_of)) or "-"
        if case.any_of:
            expected = " or ".join(sorted(case.any_of))
        if case.warns:
            expected += " (warn: " + ", ".join(sorted(case.warns)) + ")"
        if case.or_no_gain:
            expected += "; or ok with no gain"
        got = ", ".join(sorted(fails)) or "-"
        if warns:
            got += " (warn: " + ", ".join(sorted(warns)) + ")"
        return {"candidate": case.candidate, "hack": case.hack, "expected_outcome": case.outcome,
                "expected": expected, "outcome": r.outcome, "got": got, "ok": matches(case, r.outcome, fails, warns, r.timing.speedup if r.timing else None),
                "speedup": r.timing.speedup if r.timing else None, "wall_s": round(wall, 2), "message": r.message,
                "findings": [{"name": f.name, "severity": f.severity, "message": f.message} for f in r.findings]}

    return list(await asyncio.gather(*(one(c) for c in CASES)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the rows as JSON here")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--gpu", type=int, default=0)
    args = ap.parse_args(argv)
    if args.parallel < 1:
        print("--parallel must be at least 1", file=sys.stderr)
        return 2
    from cudaforge.engine.gpu.specs import gpu_spec_for_device

    profile = gpu_spec_for_device(args.gpu)
    options = EvalOptions(
        device="cuda", gpu=args.gpu, trials=3, cache_dir=Path(tempfile.mkdtemp(prefix="cf-adv-")),
        timing={"warmup": 5, "warmup_ms": 25.0, "trials": 30, "min_time_ms": 50.0, "max_trials": 500,
                "host_trials": 10, "l2_flush": True, "baselines": ["eager"]},
        peak_bandwidth_gbs=getattr(profile, "dram_bandwidth_gbs", None) if profile else None)
    start = time.perf_counter()
    rows = asyncio.run(run_all(options, args.parallel))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    for r in rows:
        if not r["ok"]:
            print(f"MISMATCH {r['candidate']}: {r['outcome']} {r['message']}", file=sys.stderr)
    print(f"\n{sum(r['ok'] for r in rows)}/{len(rows)} as expected in {time.perf_counter() - start:.0f} s\n")
    print("| candidate (tests/adversarial/cuda/) | hack | expected | got | |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['candidate']} | {r['hack']} | {r['expected_outcome']}: {r['expected']} | {r['outcome']}: "
              f"{r['got']} | {'ok' if r['ok'] else 'MISMATCH'} |")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
