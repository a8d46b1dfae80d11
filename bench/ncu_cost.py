"""What the round's profile costs, metric set by metric set: the same candidates profiled with each.

The round's profile (bench/round_latency.py) was 1.62 s on the H200, 1.15 s of it the profiled worker's
`profile` phase (ncu's replay of the candidate's kernels). Which metrics make those replay passes? Each
variant below profiles the examples' nvrtc candidates (new to every cache) through the session's Profiler,
with a warm spare, and reports the profile's wall, the worker's `profile` phase, ncu's pass count and how
many metrics came back.

    python bench/ncu_cost.py [--examples gelu,matmul] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cudaforge.engine.candidate import Candidate  # noqa: E402
from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator  # noqa: E402
from cudaforge.engine.evaluation.profiler import Profiler  # noqa: E402
from cudaforge.engine.profiling import NcuSettings  # noqa: E402
from cudaforge.engine.profiling.metrics import ADDED_METRICS, FLOP_METRICS, PAPER_METRICS  # noqa: E402
from cudaforge.engine.task import load_task  # noqa: E402
from round_latency import example, fresh, wait_ready  # noqa: E402

# name -> the settings: the default set, the default without the SASS FLOP counters, the one-pass set, and
# the FLOP counters alone (their own cost).
VARIANTS: dict[str, NcuSettings] = {
    "cudaforge": NcuSettings(),
    "cudaforge_x2": NcuSettings(),  # the candidate called twice in the range: a second kernel's own cost
    "no_flop": NcuSettings(metric_set="minimal", extra_metrics=PAPER_METRICS + ADDED_METRICS),
    "minimal": NcuSettings(metric_set="minimal"),
    "flop_only": NcuSettings(metric_set="minimal", extra_metrics=FLOP_METRICS),
}
PASSES = re.compile(r"(\d+)\s+pass(?:es)?")


def passes(log_tail: str) -> int | None:
    found = [int(m) for m in PASSES.findall(log_tail)]
    return max(found) if found else None


class TwiceEvaluator(Evaluator):
    """Profile jobs call the candidate twice inside the profiled range (EvalJob.profile_repeats)."""

    def worker_job(self, *args: Any, **kwargs: Any) -> Any:
        job = super().worker_job(*args, **kwargs)
        return replace(job, profile_repeats=2) if job.mode == "profile" else job


async def variant(name: str, settings: NcuSettings, examples: list[str], options: EvalOptions) -> list[dict[str, Any]]:
    ev = TwiceEvaluator(options) if name.endswith("_x2") else Evaluator(options)
    prof = Profiler(ev, settings)
    rows = []
    try:
        for ex in examples:
            task_path, cand_path = example(ex, "nvrtc")
            task = load_task(task_path)
            cand = Candidate.from_source(fresh(cand_path.read_text()), path=cand_path)
            prof.prewarm()
            await wait_ready(prof.spare)
            t0 = time.perf_counter()
            result = await prof.profile(task, cand)
            wall = time.perf_counter() - t0
            metrics = sorted({m for k in result.kernels for m in getattr(k, "metrics", {})})
            row = {"variant": name, "example": ex, "ok": result.ok, "wall_s": round(wall, 3),
                   "profile_s": result.worker_phases.get("profile"), "ncu_finish_s": result.worker_phases.get("ncu_finish"),
                   "warmup_s": result.worker_phases.get("profile.warmup"),
                   "replay_s": result.worker_phases.get("profile.replay"),
                   "passes": passes(result.log_tail), "kernels": len(result.kernels), "metrics": len(metrics),
                   "requested": len(result.requested_metrics), "message": result.message[:160]}
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        await prof.aclose()
        await ev.aclose()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", default="gelu,matmul,softmax")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    options = EvalOptions(device="cuda", cache_dir=Path(tempfile.mkdtemp(prefix="cf-ncu-cost-")), result_cache=False)
    examples = [e for e in args.examples.split(",") if e]
    rows: list[dict[str, Any]] = []
    for name in [v for v in args.variants.split(",") if v]:
        rows += asyncio.run(variant(name, VARIANTS[name], examples, options))
    print("\n| variant | metrics asked | kernels | worker profile s (median) | warm-up call s | replay s | ncu_finish s "
          "| profile wall s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == name and r["ok"]]
        if not mine:
            print(f"| {name} | failed: {next(r['message'] for r in rows if r['variant'] == name)} |")
            continue

        def med(key: str, rows: list[dict[str, Any]] = mine) -> float:
            values = [r[key] for r in rows if r[key] is not None]
            return statistics.median(values) if values else float("nan")

        print(f"| {name} | {mine[0]['requested']} | {med('kernels'):.0f} | {med('profile_s'):.3f} | {med('warmup_s'):.3f} | "
              f"{med('replay_s'):.3f} | {med('ncu_finish_s'):.3f} | {med('wall_s'):.3f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
