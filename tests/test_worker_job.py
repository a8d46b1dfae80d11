"""The typed messages between the app and the worker (engine/worker/job.py): the job and the report
survive their JSON round trip, the job refuses keys it does not know, and the app builds its
EvalResult from the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cudaforge.engine.candidate import Candidate
from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator
from cudaforge.engine.evaluation.sandbox import ProcessOutcome
from cudaforge.engine.integrity.registry import finding
from cudaforge.engine.results import Correctness, KernelLaunch, TrialCheck
from cudaforge.engine.task import Task
from cudaforge.engine.worker.job import EvalJob, WorkerReport


def _job(tmp_path: Path, **kw: object) -> EvalJob:
    task = Task(path=tmp_path / "task.py", source="", name="t", constants=())
    job = Evaluator(EvalOptions(device="cpu", cache_dir=tmp_path, seed=11, atol=1e-3)).worker_job(
        task, tmp_path / "c.py", tmp_path, "evaluate")
    return EvalJob.from_dict({**job.to_dict(), **kw})


def test_job_round_trips_through_json(tmp_path: Path) -> None:
    job = _job(tmp_path)
    again = EvalJob.from_dict(json.loads(json.dumps(job.to_dict())))
    assert again == job
    assert (again.seed, again.atol, again.rtol, again.device, again.mode) == (11, 1e-3, None, "cpu", "evaluate")
    assert again.result_path == str(tmp_path / "result.json") and again.gpu_lock_path is None
    assert again.timing["l2_flush"] is True


def test_job_with_an_unknown_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown keys: timed_atl"):
        _job(tmp_path, timed_atl=1.0)


def _report() -> WorkerReport:
    return WorkerReport.from_dict({
        "outcome": "ok", "message": "", "phases": {"build": 0.5}, "seeds": [3], "versions": {"torch": "x"},
        "findings": [vars(finding("side_stream"))],
        "kernels": [{"name": "k", "count": 2, "device_time_us": 5.0, "share": 1.0, "custom": True}],
        "correctness": {"passed": True, "trials": 1, "trials_passed": 1, "atol": 1e-4, "rtol": 1e-4,
                        "trial_results": [{"trial": 0, "seed": 3, "distribution": "normal",
                                           "order": "reference_first", "passed": True, "outputs": []}]},
        "compile": {"log": "warning"}, "memory": {"reference_peak_bytes": 10},
        "a_key_from_a_newer_worker": 1})


def test_report_round_trips_and_reads_by_attribute() -> None:
    report = _report()
    assert WorkerReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report
    assert report.seeds == (3,) and report.findings[0].name == "side_stream"
    assert isinstance(report.correctness, Correctness) and isinstance(report.correctness.trial_results[0], TrialCheck)
    assert isinstance(report.kernels[0], KernelLaunch)  # type: ignore[index]
    assert report.compile is not None and report.compile.ok and report.compile.log == "warning"
    assert report.memory is not None and report.memory.reference_peak_bytes == 10
    assert report.timing is None  # not recorded: the forgery check reads exactly that
    failed = WorkerReport.from_dict({"outcome": "compile_error", "compile": {"ok": True, "log": "e"}})
    assert failed.compile is not None and not failed.compile.ok


def test_evaluator_builds_its_result_from_the_report(tmp_path: Path) -> None:
    (tmp_path / "result.json").write_text(json.dumps(_report().to_dict()))
    (tmp_path / "out").write_text("")
    task = Task(path=tmp_path / "task.py", source="", name="t", constants=())
    cand = Candidate(source="class ModelNew:\n    pass\n", format="cuda")
    result = Evaluator(EvalOptions(device="cpu", cache_dir=tmp_path)).assemble(
        task, cand, tmp_path, ProcessOutcome(reason="exited", returncode=0, seconds=1.0),
        tmp_path / "out", tmp_path / "out", [])
    assert result.compile is not None and result.compile.format == "cuda"
    assert result.seeds == (3,) and result.phases == {"build": 0.5} and result.kernels[0].name == "k"
    # ok without timing or the worker's phases: the app calls it forged, whatever the report says.
    assert result.outcome == "integrity_failure" and "result_forgery" in {f.name for f in result.findings}
