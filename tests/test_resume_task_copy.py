"""Resume evaluates the run folder's own copy of the task (issue 24): the user's file may change or go after
the run started; the worker, the fit check and the prompts all use the copy, and a missing or changed copy is
said in one line. Real sessions on the CPU device, real worker processes."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from cudaforge.engine.errors import UsageError
from cudaforge.engine.session import (
    CandidateEvaluated,
    Decision,
    ScriptedDriver,
    SessionStarted,
    create_session,
    resume_session,
)
from session_kit import CORRECT, TASK, session_config

pytestmark = pytest.mark.timeout(600)


async def _one_round(tmp_path: Path, cache_dir: Path) -> tuple[Path, Path]:
    """A 1-round manual session on a copy of the CI task in tmp_path; returns (the user's task, run folder)."""
    task = tmp_path / "mine" / "task.py"
    task.parent.mkdir()
    shutil.copy(TASK, task)
    config = session_config(None, cache_dir, **{"session.rounds": 1})
    session = create_session(task, config, driver=ScriptedDriver([Decision("edit", text=CORRECT)]),
                             run_root=tmp_path / "runs")
    stopped = await session.run()
    assert stopped.reason == "max_rounds" and stopped.best_round == 1
    return task, session.store.path


async def test_resume_evaluates_the_runs_copy_after_the_original_changed(tmp_path: Path, cache_dir: Path) -> None:
    task, run_dir = await _one_round(tmp_path, cache_dir)
    # The person edits their task: other sizes and a forward that doubles its result. The run is about the
    # task as it started: 64 x 128, relu(x) * 0.5 + bias.
    edited = (task.read_text().replace("ROWS = 64", "ROWS = 8").replace("COLS = 128", "COLS = 16")
              .replace("return torch.relu(x) * SCALE + self.bias", "return 2 * (torch.relu(x) * SCALE + self.bias)"))
    assert edited != task.read_text()
    task.write_text(edited)

    # A new candidate text (so no cached result answers): the worker must import the run's copy to pass it.
    fresh = CORRECT + "\n# round 2: a new text, evaluated afresh\n"
    events: list[Any] = []
    resumed = resume_session(run_dir, overrides={"session.rounds": 2}, on_event=events.append,
                             driver=ScriptedDriver([Decision("approve"), Decision("edit", text=fresh)]))
    stopped = await resumed.run()
    assert stopped.rounds_done == 2

    [started] = [e for e in events if isinstance(e, SessionStarted)]
    assert started.resumed and f"{task} changed since the run started" in started.notice
    [evaluated] = [e for e in events if isinstance(e, CandidateEvaluated) and not e.replayed]
    result = evaluated.result
    assert evaluated.round == 2 and not result.cached
    assert result.outcome == "ok", result.message
    assert result.task_path == str((run_dir / "task.py").resolve())
    assert result.correctness is not None
    assert [o.shape_expected for o in result.correctness.outputs] == [(64, 128)]  # the run's sizes, not 8 x 16
    assert resumed.task.path == (run_dir / "task.py").resolve() and resumed.task.origin == task
    assert resumed.task.name == "mine"


async def test_resume_says_when_the_original_is_gone_and_refuses_a_missing_or_changed_copy(
        tmp_path: Path, cache_dir: Path) -> None:
    task, run_dir = await _one_round(tmp_path, cache_dir)
    task.unlink()
    resumed = resume_session(run_dir, overrides={"session.rounds": 1}, driver=ScriptedDriver([]))
    try:
        assert resumed.task.path == (run_dir / "task.py").resolve()
        assert f"{task} no longer exists; the run evaluates its own copy" in resumed.notice
    finally:
        resumed.store.close()

    copy = run_dir / "task.py"
    copy.write_text(copy.read_text().replace("SCALE = 0.5", "SCALE = 0.25"))
    with pytest.raises(UsageError, match="the task copy was changed since the run started"):
        resume_session(run_dir, driver=ScriptedDriver([]))
    copy.unlink()
    with pytest.raises(UsageError, match="the run folder has no task.py"):
        resume_session(run_dir, driver=ScriptedDriver([]))
