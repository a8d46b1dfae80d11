"""The headless front end: the terminal decision prompt, the progress lines, and `cudaforge runs`."""

from __future__ import annotations

import io
import json
import sys
import time
from pathlib import Path

import pytest
from cudaforge.engine.cli import main
from cudaforge.engine.results import EvalResult
from cudaforge.engine.session import (
    CandidateEvaluated,
    DecisionNeeded,
    RoundStarted,
    RunStore,
    SessionStarted,
    SessionStopped,
)
from cudaforge.engine.session.console import ProgressDisplay, TerminalDriver
from cudaforge.engine.task import load_task
from session_kit import TASK


async def test_terminal_driver_reads_letters_and_edits_in_the_editor(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    editor = tmp_path / "editor.sh"
    editor.write_text('#!/bin/sh\nprintf "edited by the person\\n" > "$1"\n')
    editor.chmod(0o755)
    monkeypatch.setenv("VISUAL", str(editor))
    request = DecisionNeeded(2, "recommendation", "Bottleneck: x", ("approve", "edit", "regenerate", "branch",
                                                                     "stop"))
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdin", io.StringIO("x\nr\n"))
    assert (await TerminalDriver(out).decide(request)).action == "regenerate"  # 'x' is asked again
    assert out.getvalue().count("[a]pprove") == 2
    monkeypatch.setattr(sys, "stdin", io.StringIO("e\n"))
    decision = await TerminalDriver(io.StringIO()).decide(request)
    assert decision.action == "edit" and decision.text == "edited by the person\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO("b\n1\n"))
    decision = await TerminalDriver(io.StringIO()).decide(request)
    assert decision.action == "branch" and decision.round == 1
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # closed stdin: nobody is there
    assert (await TerminalDriver(io.StringIO()).decide(request)).action == "stop"


def test_progress_lines_when_piped() -> None:
    out = io.StringIO()
    show = ProgressDisplay(out, live=False)
    show(SessionStarted("run-1", "/tmp/run-1", "task.py", "auto", 3))
    show(RoundStarted(1, "seed", None))
    show(CandidateEvaluated(1, EvalResult(task_path="t.py", candidate_hash="0", format="cpu", device="cpu",
                                                  outcome="wrong_result", accepted=False,
                                                  message="1 of 2 outputs differ")))
    show(SessionStopped("max_rounds", "reached the round limit (3)", None, None, 3))
    lines = out.getvalue().splitlines()
    assert lines == ["started run run-1 (auto mode) in /tmp/run-1", "round 1: seed",
                     "  evaluated: wrong_result: 1 of 2 outputs differ",
                     "stopped: reached the round limit (3); best none"]


def test_runs_lists_and_prunes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    task = load_task(TASK)
    stores = []
    for i in range(3):
        store = RunStore.create(tmp_path / "runs", task, config={}, mode="auto", run_id=f"run-{i}")
        store.save_state(status="finished", best_speedup=1.5 + i)
        store.close()
        stores.append(store)
        time.sleep(0.01)
    assert main(["runs", "--runs", str(tmp_path / "runs"), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["runs"]
    assert [r["run_id"] for r in listed] == ["run-0", "run-1", "run-2"]
    assert main(["runs", "--runs", str(tmp_path / "runs"), "--prune", "--keep", "1"]) == 0
    assert "removed" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["run-2"]
    assert main(["runs", "--runs", str(tmp_path / "runs"), "--prune"]) == 2  # says what it needs


def test_run_refuses_review_mode_without_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    code = main(["run", str(TASK), "--device", "cpu", "--mode", "review", "--runs", str(tmp_path)])
    assert code == 2 and "stdin is not a terminal" in capsys.readouterr().err


def test_resume_of_a_missing_run_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["resume", str(tmp_path / "nope"), "--auto"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a run folder" in err[0]
