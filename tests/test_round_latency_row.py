"""bench/round_latency.py's round row, built from a real round on the CPU device: the evaluation in a spare
worker and the profile beside it (no ncu on the CPU device: the profile fails, and says why). The row is what
the latency table and bench/RESULTS.md read; a key lost from it (session 18's KeyError on the H200: a review
edit had commented out three keys) fails here before a device call is spent on it."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from cudaforge.engine.candidate import load_candidate
from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator
from cudaforge.engine.evaluation.profiler import Profiler
from cudaforge.engine.profiling import NcuSettings
from cudaforge.engine.task import load_task

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import round_latency  # noqa: E402

HERE = Path(__file__).parent / "core_tasks"


def test_a_round_row_has_every_key_the_table_reads(cpu_options: EvalOptions) -> None:
    async def go() -> dict:
        ev = Evaluator(cpu_options)
        prof = Profiler(ev, NcuSettings())
        try:
            return await round_latency.one_round(ev, prof, load_task(HERE / "task.py"),
                                                 load_candidate(HERE / "correct.py"), prewarm=True)
        finally:
            await ev.aclose()
            await prof.aclose()

    row = asyncio.run(go())
    assert row["outcome"] == "ok", row["message"]
    for key in ("profile_own_s", "message", "profile_ok", "exit_s", "profile_error", "profile_message",
                "kernels_profiled", "phases", "worker_phases", "profile_worker_phases", "spawn_parts",
                "profile_parts", "compile_s", "warm_wait_s"):
        assert key in row, key
    assert row["profile_ok"] is False and row["profile_error"]  # no ncu on the CPU device, and it says so
    assert row["phases"]["total"] > 0 and row["worker_phases"]
    assert row["exit_s"] is not None and row["exit_s"] >= 0  # the worker's exit was waited for (settle)
    # the table's line for these rows, over one task, reads them without a KeyError
    row.update(task="core", format="cpu", pipeline="ours", cached_s=0.0, cached_hit=False, eval_only_s=1.0,
               eval_only_outcome="ok", eval_only_phases={})
    text = round_latency.table({"ours": [row]})
    assert "| cpu | ours | 1 |" in text and f"| ours | cpu | core | ok | {row['profile_error']} |" in text
