"""The worker's report is typed from the start (engine/worker/job.py ReportDraft): the pipeline sets records,
not dicts, and the result.json the app reads back with WorkerReport.from_dict is exactly the report the
worker finished."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pickle
import stat
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from cudaforge.engine.candidate import Candidate, load_candidate
from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator
from cudaforge.engine.results import (
    CompileResult,
    Correctness,
    EvalResult,
    Finding,
    KernelLaunch,
    Memory,
    OutputCheck,
    SpeedOfLight,
    Timing,
    TrialCheck,
)
from cudaforge.engine.task import Task, load_task
from cudaforge.engine.worker.job import ReportDraft, WorkerReport

CORE = Path(__file__).parent / "core_tasks"

# Run as the worker: the real entry point, with the draft pickled just before it is written as JSON.
KEEP_DRAFT = """
import pickle
import sys
from pathlib import Path

from cudaforge.engine.worker import entry

typed = entry._typed


def keep(report):
    Path(sys.argv[2]).write_bytes(pickle.dumps(report))
    return typed(report)


entry._typed = keep
entry.main([sys.argv[1]])
"""


def test_the_draft_has_the_reports_fields() -> None:
    """Every record of the report has its place on the draft (plus the memory notes it is made from)."""
    draft = [(f.name, f.type) for f in dataclasses.fields(ReportDraft)]
    report = [(f.name, f.type) for f in dataclasses.fields(WorkerReport)]
    assert [name for name, _ in draft] == [name for name, _ in report] + ["memory_notes"]
    differ = {name for (name, a), (_, b) in zip(draft[:-1], report, strict=True) if a != b}
    assert differ == {"findings"}  # a list while the checks add to it, a tuple once finished


def test_a_failed_builds_record_follows_from_dicts_rule() -> None:
    """A failure's log with no build record behind it: ok unless the outcome is compile_error, as
    WorkerReport.from_dict reads the same record from JSON."""
    for outcome in ("compile_error", "runtime_error"):
        draft = ReportDraft(outcome=outcome)
        draft.note_build_failure("error: x", 1.5)
        assert draft.finish() == WorkerReport.from_dict({"outcome": outcome, "compile": {"log": "error: x",
                                                                                          "seconds": 1.5}})
    # A Triton kernel that fails at its first call, after the import built: the build's record, not ok.
    draft = ReportDraft(outcome="compile_error", compile=CompileResult(ok=True, format="triton", seconds=0.2))
    draft.note_build_failure("line 3: error", None)
    finished = draft.finish().compile
    assert finished == CompileResult(ok=False, format="triton", seconds=0.2, log="line 3: error")
    # Nothing to add: no record is made.
    draft = ReportDraft(outcome="crash")
    draft.note_build_failure("", None)
    assert draft.compile is None


def _keeping_python(tmp_path: Path, draft_path: Path) -> str:
    """An interpreter for EvalOptions.python that runs the worker through KEEP_DRAFT (anything else as is)."""
    keep = tmp_path / "keep_draft.py"
    keep.write_text(KEEP_DRAFT)
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nif [ "$1" = "-m" ] && [ "$2" = "cudaforge.engine.worker" ]; then\n'
                       f'  exec "{sys.executable}" "{keep}" "$3" "{draft_path}"\nfi\n'
                       f'exec "{sys.executable}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper)


def test_a_cpu_evaluations_result_json_is_the_finished_draft(cpu_options: EvalOptions, tmp_path: Path) -> None:
    draft_path = tmp_path / "draft.pickle"
    options = replace(cpu_options, python=_keeping_python(tmp_path, draft_path))
    kept: dict[str, Any] = {}

    class Keeping(Evaluator):
        def assemble(self, task: Task, candidate: Candidate, workdir: Path, *rest: Any, **kw: Any) -> EvalResult:
            kept["json"] = json.loads((workdir / "result.json").read_text())
            return super().assemble(task, candidate, workdir, *rest, **kw)

    result = asyncio.run(Keeping(options).evaluate(load_task(CORE / "task.py"), load_candidate(CORE / "correct.py")))
    assert result.outcome == "ok", result.message + result.traceback
    draft = pickle.loads(draft_path.read_bytes())
    assert isinstance(draft, ReportDraft)
    # Typed from the start: every record on the draft is its dataclass, none a dict made with to_dict.
    assert isinstance(draft.compile, CompileResult) and draft.compile.ok
    corr = draft.correctness
    assert isinstance(corr, Correctness) and corr.passed
    assert corr.trial_results and all(isinstance(t, TrialCheck) for t in corr.trial_results)
    assert all(isinstance(o, OutputCheck) for t in corr.trial_results for o in t.outputs)
    assert draft.kernels and all(isinstance(k, KernelLaunch) for k in draft.kernels)
    assert any(k.custom for k in draft.kernels)  # the candidate's C++ op, counted by its calls on the CPU
    assert isinstance(draft.timing, Timing) and isinstance(draft.speed_of_light, SpeedOfLight)
    assert isinstance(draft.memory, Memory) and draft.memory.reference_peak_bytes is None  # no peaks on the CPU
    assert draft.memory.footprint_bytes == draft.memory_notes["footprint_bytes"]
    assert all(isinstance(f, Finding) for f in draft.findings)
    assert isinstance(draft.seeds, tuple) and isinstance(draft.copied_parameters, tuple)
    # What the app reads is what the worker finished.
    assert WorkerReport.from_dict(kept["json"]) == draft.finish()
    assert kept["json"] == draft.finish().to_dict()
    assert result.kernels == draft.kernels and result.correctness == corr and result.memory == draft.memory


def test_a_malformed_report_is_the_workers_runtime_error() -> None:
    """A bug in the worker (a record that does not fit): the report says so instead of being lost."""
    from cudaforge.engine.worker.entry import _typed

    broken = ReportDraft(outcome="ok", phases=None)  # type: ignore[arg-type]
    written = WorkerReport.from_dict(_typed(broken))
    assert written.outcome == "runtime_error" and written.message.startswith("the worker's report is malformed: ")
    assert written.correctness is None and written.timing is None  # the forgery check's "not recorded"
