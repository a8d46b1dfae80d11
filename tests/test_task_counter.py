"""fit.TaskCounter: many tasks counted by one real subprocess, in order, ahead of their evaluations."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from cudaforge.engine.evaluation.fit import TaskCounter
from cudaforge.engine.worker.memory import count_task

REPO = Path(__file__).resolve().parent.parent


def test_one_process_counts_every_task_and_says_which_it_could_not(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nraise RuntimeError('no model here')\n")
    paths = [REPO / "examples" / "relu" / "task.py", broken, tmp_path / "missing.py", REPO / "examples" / "matmul" / "task.py"]

    async def run() -> list[object]:
        counter = TaskCounter(python=sys.executable)
        counter.ahead(paths)
        try:
            # Asked out of order: each waits for its own line.
            got = {p: await counter.counts_of(p) for p in reversed(paths)}
            assert await counter.counts_of(tmp_path / "never_asked.py") is None
        finally:
            await counter.aclose()
        return [got[p] for p in paths]

    relu, bad, missing, matmul = asyncio.run(run())
    assert bad is None and missing is None  # the workers count (and report) these themselves
    assert relu is not None and matmul is not None
    # The same counts as the one-task form gives (what check_task_fit hands the workers).
    for counts, path in ((relu, paths[0]), (matmul, paths[3])):
        alone = count_task(str(path), 42, "fp32")
        assert counts.footprint["footprint_bytes"] == alone["footprint_bytes"] > 0
        assert counts.work is not None and counts.work.flops == alone["work"]["flops"]
    assert matmul.work.flops > 0


def test_closing_before_the_end_leaves_no_process_and_no_waiter_hanging(tmp_path: Path) -> None:
    paths = [REPO / "examples" / name / "task.py" for name in ("relu", "gelu", "softmax", "layernorm")] * 5

    async def run() -> None:
        counter = TaskCounter(python=sys.executable)
        counter.ahead(paths)
        waiter = asyncio.ensure_future(counter.counts_of(paths[-1]))
        await asyncio.sleep(0.2)
        await counter.aclose()
        await asyncio.wait_for(waiter, 10)  # resolved (with None) rather than left waiting
        assert counter._proc is None

    asyncio.run(run())


def test_a_task_that_hangs_stops_the_counting_and_the_rest_get_no_counts(tmp_path: Path) -> None:
    hangs = tmp_path / "hangs.py"
    hangs.write_text("import time\nwhile True:\n    time.sleep(1)\n")
    relu = REPO / "examples" / "relu" / "task.py"

    async def run() -> tuple[object, object, object]:
        counter = TaskCounter(python=sys.executable, task_limit_s=8.0)
        counter.ahead([relu, hangs, relu.parent.parent / "gelu" / "task.py"])
        try:
            return (await counter.counts_of(relu), await counter.counts_of(hangs),
                    await counter.counts_of(relu.parent.parent / "gelu" / "task.py"))
        finally:
            await counter.aclose()

    first, hung, after = asyncio.run(asyncio.wait_for(run(), 60))
    assert first is not None and hung is None and after is None
