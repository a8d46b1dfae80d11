"""Evaluations side by side on one GPU (CUDA): every check runs beside the others, each timed window alone
(engine/gpu/rwlock.py), each evaluation admitted by its memory (engine/gpu/ledger.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from cudaforge.engine.candidate import load_candidate
from cudaforge.engine.evaluation.evaluator import Evaluator
from cudaforge.engine.gpu import ledger
from cudaforge.engine.gpu.lock import gpu_lock_path
from cudaforge.engine.task import load_task

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_four_evaluations_in_flight_share_the_gpu_and_time_alone(gpu_options, tmp_path: Path) -> None:
    names = [p.parent.name for p in sorted(EXAMPLES.glob("*/nvrtc.py"))][:4]
    # Each task under a folder of this test's own: the ledger names a reservation by its task's folder and file,
    # and the tests beside this one (pytest-xdist) evaluate the same examples under their own names.
    for n in names:
        (tmp_path / f"gpushare_{n}").mkdir()
        (tmp_path / f"gpushare_{n}" / "task.py").write_text((EXAMPLES / n / "task.py").read_text())

    async def run() -> list:
        evs = [Evaluator(gpu_options) for _ in names]
        try:
            return await asyncio.gather(*(ev.evaluate(load_task(tmp_path / f"gpushare_{n}" / "task.py"),
                                                      load_candidate(EXAMPLES / n / "nvrtc.py"), use_cache=False)
                                          for ev, n in zip(evs, names, strict=True)))
        finally:  # a result comes once its report is written; the worker gives its memory back as it exits
            for ev in evs:
                await ev.aclose()

    results = asyncio.run(run())
    for name, r in zip(names, results, strict=True):
        assert r.outcome == "ok", f"{name}: {r.message}\n{r.stderr_tail}"
        assert r.phases.get("gpu_exclusive", 0.0) > 0 and r.phases.get("gpu_shared", 0.0) > 0, r.phases
    # Every reservation of these evaluations was given back (the ledger is the card's: evaluations of tests
    # running beside this one, under pytest-xdist, hold their own, and once had the same names as these).
    ours = {f"evaluate gpushare_{n}/task" for n in names}
    assert [e for e in ledger.live_entries(gpu_lock_path(gpu_options.gpu)) if e.label in ours] == []
