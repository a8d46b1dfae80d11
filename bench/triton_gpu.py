"""Triton candidates on a GPU: every Triton example through the Evaluator, our timing against
`triton.testing.do_bench`, and the latency of a Triton round with its profile.

1. Each `examples/*/triton_kernel.py` is evaluated as a session would (sandboxed worker, correctness,
   kernel check, interleaved CUDA-event timing with L2 flush): outcome, speedup, the candidate's own
   share of kernel time, the autotuner's choice.
2. The same ModelNew is timed in this process by `triton.testing.do_bench` (median, L2 cleared between
   calls); the two medians should agree within 5%.
3. Round latency (engine time from candidate text to an evaluated and profiled result, LLM excluded)
   for one example: a cold round (empty Triton cache, so JIT and autotuning included), then warm
   rounds: the candidate text is new each time (a nonce comment; no result or profile cache hit),
   its kernels unchanged, so Triton's cache (compiled kernels and autotuning results, under our
   cache dir) is warm. Target: <= 5 s per warm round. Spares are pre-warmed as in a session (the wait
   for them is the LLM's time, not the round's).

Usage: python bench/triton_gpu.py [--examples relu,gelu,softmax,layernorm] [--latency gelu] [--rounds 2]
                                  [--json OUT]
About 1.5-2.5 min on an H200 (4 evaluations, 4 do_bench runs, 3 profiled rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(ROOT / "bench"))

from cudaforge.engine.candidate import Candidate  # noqa: E402
from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator  # noqa: E402
from cudaforge.engine.evaluation.profiler import Profiler  # noqa: E402
from cudaforge.engine.profiling import NcuSettings  # noqa: E402
from cudaforge.engine.task import load_task  # noqa: E402
from round_latency import one_round  # noqa: E402

CANDIDATE = "triton_kernel.py"


def _module(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def do_bench_ms(name: str, seed: int = 42) -> float:
    """Median ms of ModelNew.forward by triton.testing.do_bench, inputs as the worker draws them."""
    import torch
    import triton.testing

    task = _module(EXAMPLES / name / "task.py", f"bench_task_{name}")
    cand = _module(EXAMPLES / name / CANDIDATE, f"bench_cand_{name}")
    torch.manual_seed(seed)
    model = cand.ModelNew(*task.get_init_inputs()).cuda().eval()
    torch.manual_seed(seed)
    with torch.device("cuda"):
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    with torch.no_grad():
        return float(triton.testing.do_bench(lambda: model(*inputs), warmup=100, rep=500, return_mode="median"))


async def evaluate_examples(names: list[str], options: EvalOptions) -> list[dict[str, Any]]:
    rows = []
    for name in names:
        task = load_task(EXAMPLES / name / "task.py")
        cand = Candidate.from_source((EXAMPLES / name / CANDIDATE).read_text(), path=EXAMPLES / name / CANDIDATE)
        ev = Evaluator(options)
        t0 = time.perf_counter()
        r = await ev.evaluate(task, cand)
        wall = time.perf_counter() - t0
        await ev.aclose()
        own = sum(k.share for k in r.kernels if k.custom)
        t = r.timing
        tuned = {k: v.get("best") for k, v in (r.compile.triton.get("autotune", {}) if r.compile else {}).items()}
        row = {"task": name, "outcome": r.outcome, "message": r.message, "wall_s": round(wall, 2),
               "speedup": r.speedup, "candidate_ms": t.candidate.median_ms if t else None,
               "reference_ms": t.reference.median_ms if t else None, "own_share": round(own, 4),
               "kernels": [(k.name, k.custom, k.share) for k in r.kernels][:6], "autotune": tuned,
               "findings": [f"{f.severity}:{f.name}" for f in r.findings]}
        if t is not None:
            row["do_bench_ms"] = do_bench_ms(name)
            row["agreement"] = t.candidate.median_ms / row["do_bench_ms"] - 1.0
        print(f"eval {name:10s} {r.outcome:10s} {wall:5.1f} s  {r.message[:90]}", file=sys.stderr, flush=True)
        rows.append(row)
    return rows


async def latency(name: str, rounds: int, options: EvalOptions) -> list[dict[str, Any]]:
    task = load_task(EXAMPLES / name / "task.py")
    source = (EXAMPLES / name / CANDIDATE).read_text()
    ev = Evaluator(options)
    prof = Profiler(ev, NcuSettings())
    out = []
    try:
        for i in range(rounds + 1):
            cand = Candidate.from_source(source + f"\n# round {uuid.uuid4().hex}\n")
            row = await one_round(ev, prof, task, cand, prewarm=True)
            row["round"] = "cold" if i == 0 else f"warm {i}"
            print(f"round {row['round']:7s} {row['outcome']:8s} total {row['phases']['total']:5.2f} s "
                  f"(profile {row['phases']['profile']:.2f} s, ok={row['profile_ok']})", file=sys.stderr, flush=True)
            out.append(row)
    finally:
        await ev.aclose()
        await prof.aclose()
    return out


def table(evals: list[dict[str, Any]], rounds: list[dict[str, Any]]) -> str:
    lines = ["| example | outcome | speedup | ours (µs) | do_bench (µs) | diff | own share | autotune |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in evals:
        ours = f"{r['candidate_ms'] * 1e3:.1f}" if r["candidate_ms"] else "-"
        db = f"{r['do_bench_ms'] * 1e3:.1f}" if r.get("do_bench_ms") else "-"
        diff = f"{r['agreement']:+.1%}" if "agreement" in r else "-"
        sp = f"{r['speedup']:.2f}x" if r["speedup"] else "-"
        tuned = "; ".join(f"{k}: {v['kwargs']} w{v['num_warps']}" for k, v in r["autotune"].items() if v) or "-"
        lines.append(f"| {r['task']} | {r['outcome']} | {sp} | {ours} | {db} | {diff} | {r['own_share']:.0%} | {tuned} |")
    if rounds:
        lines += ["", "| round | outcome | spawn | build | correctness | timing | profile | total (s) |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in rounds:
            p = r["phases"]
            lines.append(f"| {r['round']} | {r['outcome']} (profile ok={r['profile_ok']}) | {p['spawn']:.2f} | "
                         f"{p['build']:.2f} | {p['correctness']:.2f} | {p['timing']:.2f} | {p['profile']:.2f} | "
                         f"{p['total']:.2f} |")
        warm = [r["phases"]["total"] for r in rounds if r["round"] != "cold"]
        if warm:
            lines.append(f"warm Triton round, median {statistics.median(warm):.2f} s (target <= 5 s)")
    ok = [r for r in evals if "agreement" in r]
    within = sum(1 for r in ok if abs(r["agreement"]) <= 0.05)
    lines.append(f"accepted {sum(r['outcome'] == 'ok' for r in evals)}/{len(evals)}; timing within 5% of do_bench: "
                 f"{within}/{len(ok)}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", default=",".join(sorted(x.parent.name for x in EXAMPLES.glob(f"*/{CANDIDATE}"))))
    p.add_argument("--latency", default="gelu", help="example whose Triton round latency is measured ('' to skip)")
    p.add_argument("--rounds", type=int, default=2, help="warm rounds after the cold one")
    p.add_argument("--gpu", type=int, default=0)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    start = time.perf_counter()
    base = Path(tempfile.mkdtemp(prefix="cf-triton-bench-"))
    options = EvalOptions(device="cuda", gpu=args.gpu, cache_dir=base / "eval-cache")
    evals = asyncio.run(evaluate_examples([n for n in args.examples.split(",") if n], options))
    rounds: list[dict[str, Any]] = []
    if args.latency:  # a fresh cache dir: the first round compiles and autotunes from nothing
        lat_options = EvalOptions(device="cuda", gpu=args.gpu, cache_dir=base / "latency-cache")
        rounds = asyncio.run(latency(args.latency, args.rounds, lat_options))
    text = table(evals, rounds)
    if args.json:
        args.json.write_text(json.dumps({"examples": evals, "rounds": rounds, "table": text,
                                         "wall_s": time.perf_counter() - start}, indent=2, default=str))
    print(text)
    print(f"wall {time.perf_counter() - start:.0f} s")
    return 0 if all(r["outcome"] == "ok" for r in evals) else 1


if __name__ == "__main__":
    sys.exit(main())
