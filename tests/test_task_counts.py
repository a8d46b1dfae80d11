"""A task's counts made once by the app (fit.task_counts, from memory.footprint_main's subprocess) and taken by
every worker: the footprint and the reference call's bytes and FLOPs, counted on the meta device. A worker
given them counts nothing itself and so never imports torch._dynamo (the meta-device counts' dispatch
modes do: 1.4 s of this machine's worker start, seconds of a spare's warm-up on the H200); counts that do
not match the worker's own inputs and parameters are not taken."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import tempfile
from pathlib import Path

import pytest
from cudaforge.engine.candidate import load_candidate
from cudaforge.engine.evaluation.evaluator import Evaluator
from cudaforge.engine.evaluation.fit import task_counts, task_footprint
from cudaforge.engine.results import TaskCounts
from cudaforge.engine.task import load_task

CORE = Path(__file__).parent / "core_tasks"

MATMUL_TASK = '''
import torch
import torch.nn as nn

N = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(N, 32)

    def forward(self, a, b):
        return self.proj(torch.matmul(a, b))


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
'''


def _counts(path: Path, precision: str = "fp32") -> TaskCounts:
    fp = asyncio.run(task_footprint(path, python=sys.executable, precision=precision))
    counts = task_counts(fp, precision)
    assert counts is not None, fp
    return counts


def test_the_footprint_check_counts_the_reference_calls_bytes_and_flops(tmp_path: Path) -> None:
    task = tmp_path / "mm" / "task.py"
    task.parent.mkdir()
    task.write_text(MATMUL_TASK)
    counts = _counts(task)
    work = counts.work
    assert work is not None
    # matmul 2·64³ and the linear layer 2·64·64·32, as FlopCounterMode counts them
    assert work.flops == 2 * 64 ** 3 + 2 * 64 * 64 * 32
    assert (work.input_bytes, work.param_bytes, work.output_bytes) == (2 * 64 * 64 * 4, (64 * 32 + 32) * 4, 64 * 32 * 4)
    assert counts.footprint["footprint_bytes"] > 0 and counts.footprint["input_bytes"] == work.input_bytes
    half = _counts(task, "fp16").work
    assert half is not None and half.input_bytes == work.input_bytes // 2 and half.flops == work.flops


def _evaluate(cpu_options, counts: TaskCounts | None, workdirs: Path, monkeypatch: pytest.MonkeyPatch):
    """The core task's correct candidate in a real worker, its import times on its stderr (kept)."""
    workdirs.mkdir()
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")
    monkeypatch.setattr(tempfile, "tempdir", str(workdirs))
    task = load_task(CORE / "task.py")
    evaluator = Evaluator(cpu_options, keep_workdirs=True)
    if counts is not None:
        evaluator.use_task_counts(task, counts)

    async def run():
        try:
            return await evaluator.evaluate(task, load_candidate(CORE / "correct.py"), use_cache=False)
        finally:
            await evaluator.aclose()

    result = asyncio.run(run())
    assert result.outcome == "ok", result.message
    (stderr,) = workdirs.glob("cudaforge-evaluate-*/sandbox/stderr.txt")
    imported = {line.rsplit("|", 1)[-1].strip() for line in stderr.read_text().splitlines() if line.startswith("import time:")}
    return result, imported


def test_a_worker_given_the_counts_takes_them_and_never_imports_dynamo(cpu_options, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    counts = _counts(CORE / "task.py")
    assert counts.work is not None and counts.work.flops == 0  # relu, scale, bias: no FLOPs FlopCounterMode counts
    marked = dataclasses.replace(counts, work=dataclasses.replace(counts.work, flops=12345))  # to see it taken
    result, imported = _evaluate(cpu_options, marked, tmp_path / "given", monkeypatch)
    assert result.speed_of_light is not None and result.speed_of_light.flops == 12345
    assert result.memory is not None and result.memory.footprint_bytes == counts.footprint["footprint_bytes"]
    assert "torch" in imported and "torch._dynamo" not in imported and "torch._inductor" not in imported


def test_counts_of_other_inputs_are_not_taken(cpu_options, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counts = _counts(CORE / "task.py")
    assert counts.work is not None
    other = dataclasses.replace(counts, work=dataclasses.replace(counts.work, flops=12345,
                                                                  input_bytes=counts.work.input_bytes * 2))
    result, imported = _evaluate(cpu_options, other, tmp_path / "other", monkeypatch)
    assert result.speed_of_light is not None and result.speed_of_light.flops == 0  # counted again in the worker
    assert "torch._dynamo" in imported  # which is what the counts spare a worker


def test_spares_started_once_the_counts_come_skip_what_counting_needs(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A spare's warm-up loads torch._dynamo (its `counting_s` step) for jobs that bring no counts; once the
    evaluator has the task's counts, the spares it starts skip it. (No GPU here: the CUDA spares stop at
    their context; what is checked is the warm-up's steps before it.)"""
    from cudaforge.engine.evaluation.evaluator import EvalOptions

    monkeypatch.setenv("CUDAFORGE_LOCK_DIR", str(tmp_path / "locks"))
    evaluator = Evaluator(EvalOptions(device="cuda", cache_dir=tmp_path / "cache", spares=1))
    task = load_task(CORE / "task.py")
    try:
        evaluator.prewarm()
        before = _ready(evaluator.spare)
        assert evaluator.spares_count_tasks and "counting_s" in before["steps"]
        evaluator.use_task_counts(task, _counts(CORE / "task.py"))
        assert not evaluator.spares_count_tasks
        evaluator.spare.kill()  # the next one is started with what the evaluator knows now
        evaluator.prewarm()
        after = _ready(evaluator.spare)
        assert after["pid"] != before["pid"] and "counting_s" not in after["steps"] and after["steps"]["import_s"] > 0
    finally:
        asyncio.run(evaluator.aclose())


def _ready(spare, limit_s: float = 120.0) -> dict:
    import time

    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        ready = spare.ready() if spare is not None else None
        if ready is not None:
            return ready
        time.sleep(0.05)
    raise AssertionError("the spare never became ready")


def test_a_cuda_session_starts_its_first_spares_without_counting_and_takes_it_back_if_no_counts_come(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CUDA session's fit check counts the task for the evaluator (Session._does_not_fit), so the spares started
    before it (the first evaluation's and ncu's) skip torch._dynamo (3.9-5.4 s of an ncu spare's warm-up on the
    H100). Where the check counts nothing (here: no GPU, so no fit check result), the jobs come without counts
    and later spares load what counting needs again. The real session, evaluator and fit check subprocess."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("the fit check counts the task on a GPU machine: the path without counts is not taken")
    from cudaforge.engine.session import create_session
    from llm_server import ScriptedLLMServer
    from session_kit import KEY, KEY_ENV, TASK, session_config

    monkeypatch.setenv("CUDAFORGE_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv(KEY_ENV, KEY)
    with ScriptedLLMServer([]) as server:
        config = session_config(server, tmp_path / "cache", **{"eval.device": "cuda", "session.mode": "auto",
                                                                 "run.folder": str(tmp_path / "runs")})
        session = create_session(TASK, config)
        evaluator = session.evaluator
        assert evaluator.spares_count_tasks
        assert session._counts_will_come() and not evaluator.spares_count_tasks  # before the first spares
        assert asyncio.run(session._does_not_fit()) == ""
        assert evaluator.spares_count_tasks  # no counts came: later spares count again
