"""Pilot flows of issue 25's workbench points: the build streams into the Compiler pane while it runs,
diagnostics are counted and stepped through, editing keeps the person's work, manual mode starts from
the task's skeleton, a candidate loads from a file, and `--open` tells the run as its state says."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest
from cudaforge.engine.skeleton import manual_skeleton
from cudaforge.tui.app import WorkbenchApp
from cudaforge.tui.cli import LaunchSpec
from cudaforge.tui.format import classify_log, diagnostic_lines
from cudaforge.tui.screens.confirm import ConfirmScreen
from cudaforge.tui.screens.load_file import LoadFileScreen
from cudaforge.tui.widgets.compiler import CompilerPane
from cudaforge.tui.widgets.rounds import RoundsPane
from cudaforge.tui.widgets.status import StatusBar
from llm_server import ScriptedLLMServer
from session_kit import CORRECT, KEY, KEY_ENV, coder_reply
from textual.pilot import Pilot
from textual.widgets import Input, Static
from tui_kit import FIXTURE_RUN, SIZE, pending_point, round_finished, task_app, wait_until, write_config


@pytest.fixture(autouse=True)
def _llm_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


def fresh_build(source: str) -> str:
    """The CI candidate with its C++ source changed by a comment: a new build key, so a real build runs."""
    marker = f"// build {uuid.uuid4().hex}\n"
    out = source.replace('_SOURCE = r"""\n', '_SOURCE = r"""\n' + marker, 1)
    assert out != source
    return out


def header_text(pane: CompilerPane) -> str:
    return str(pane.query_one("#compiler-header").content)


def resumed_stopped_run(tmp_path: Path) -> Path:
    """The recorded 3-round run as a resumed session leaves it when cancelled in round 5: round 4 finished
    with the same speedup as round 3 (so a best recomputed from the rounds would pick r4), round 5 started
    and never finished, and state.json saying what the session decided: stopped, best round 3, 4 rounds."""
    run = tmp_path / "resumed-run"
    shutil.copytree(FIXTURE_RUN, run)
    rounds = run / "rounds"
    shutil.copytree(rounds / "003", rounds / "004")
    (rounds / "004" / "judge-1.json").unlink(missing_ok=True)
    meta = json.loads((rounds / "004" / "round.json").read_text())
    meta.update(round=4, parent=3, kind="optimize")
    (rounds / "004" / "round.json").write_text(json.dumps(meta))
    (rounds / "005").mkdir()
    for name in ("candidate.py", "candidate.json"):
        shutil.copy(rounds / "003" / name, rounds / "005" / name)
    (rounds / "005" / "round.json").write_text(json.dumps(
        {"round": 5, "kind": "optimize", "parent": 4, "started_at": meta["started_at"] + 10, "finished": False}))
    state = json.loads((run / "state.json").read_text())
    state.update(status="stopped", stop_reason="cancelled", stop_message="the session was cancelled",
                 best_round=3, rounds_done=4)
    (run / "state.json").write_text(json.dumps(state))
    return run


def open_app(run: Path, cwd: Path) -> WorkbenchApp:
    return WorkbenchApp(LaunchSpec(open_run=str(run), use_user_config=False), system_stats=False, cwd=cwd)


async def select_round(pilot: Pilot[int], app: WorkbenchApp, n: int) -> None:
    """Move the tree's cursor onto round n with the arrow keys, as a person does."""
    tree = app.query_one(RoundsPane)
    tree.focus()
    await pilot.pause()
    for _ in range(12):
        if tree.cursor_node is not None and tree.cursor_node.data == n:
            break
        current = tree.cursor_node.data if tree.cursor_node is not None else None
        await pilot.press("up" if current is None or current > n else "down")
    await pilot.pause()
    assert app.selected == n, f"round {n} selected (at {app.selected})"


async def test_the_build_streams_into_the_compiler_pane_while_it_runs(tmp_path: Path, cache_dir: Path) -> None:
    with ScriptedLLMServer([coder_reply(fresh_build(CORRECT))]) as server:
        app = task_app(tmp_path, write_config(tmp_path, cache_dir, server, rounds=1))
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, pending_point(app, "candidate", 1), what="the Coder's candidate")
            await pilot.press("a", "2")  # approve, then look at the Compiler pane
            pane = app.query_one(CompilerPane)
            view = app.model.ensure(1)
            await wait_until(pilot, lambda: view.build_started is not None and view.result is None, timeout=120,
                             what="the build to start")
            await wait_until(pilot, lambda: "building" in header_text(pane), what="the building header")
            assert "so far" in header_text(pane), "the time elapsed is shown"
            seen_live: list[str] = []

            def streamed() -> bool:
                if view.result is None and "[1/2]" in pane.log_text:
                    seen_live.append(pane.log_text)
                return bool(seen_live) or view.result is not None

            await wait_until(pilot, streamed, timeout=300, what="ninja's first step in the pane")
            assert seen_live, "ninja's step line was shown before the round's result arrived"
            assert "c++" in seen_live[0]
            await wait_until(pilot, round_finished(app, 1), timeout=300, what="round 1")
            assert view.status == "ok"
            assert header_text(pane).startswith("build ok")
            assert "[2/2]" in pane.log_text, "the finished build keeps its steps"
            streamed_lines = "\n".join(view.build_lines)
            assert "[1/2]" in streamed_lines and "[2/2]" in streamed_lines, "every step streamed, in one build's log"


# ---- the Compiler pane counts diagnostics (a recorded run: round 1 failed to build with one error) ----

async def test_the_compiler_pane_counts_and_steps_through_diagnostics_only(tmp_path: Path) -> None:
    app = open_app(FIXTURE_RUN, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await select_round(pilot, app, 1)
        await pilot.press("2")
        pane = app.query_one(CompilerPane)
        header = header_text(pane)
        assert "1 error:" in header and "error line" not in header, header
        assert "22.7 s" in header, "the failed build's time is the build phase's"
        stepped = set()
        for _ in range(3):
            await pilot.press("n")
            stepped.add(pane.lines[pane.errors[pane.current]].text)  # type: ignore[index]
        assert len(stepped) == 1 and "main.cpp:5:15: error: expected" in stepped.pop()
        assert not any("ninja: build stopped" in pane.lines[i].text or "Traceback" in pane.lines[i].text
                       for i in pane.errors)


def test_diagnostics_are_the_compilers_own_lines() -> None:
    log = ("[1/2] c++ -MMD -Werror main.cpp\nFAILED: main.o\nmain.cpp: In function 'f':\n"
           "main.cpp:5:15: error: expected ';'\nmain.cpp:8:3: error: 'xp' was not declared\n"
           "ninja: build stopped: subcommand failed.\nTraceback (most recent call last):\n"
           "RuntimeError: Error building extension 'x': main.cpp:5:15: error: expected ';'\n"
           "main.cpp:5:15: error: expected ';'\n")
    lines = classify_log(log)
    assert [lines[i].text for i in diagnostic_lines(lines)] == [
        "main.cpp:5:15: error: expected ';'", "main.cpp:8:3: error: 'xp' was not declared"]
    nvrtc = classify_log("kernel.cu(12): error: identifier \"q\" is undefined\n1 error detected in kernel.cu")
    assert [nvrtc[i].text for i in diagnostic_lines(nvrtc)] == ['kernel.cu(12): error: identifier "q" is undefined']


# ---- --open tells a resumed, stopped run as its state says ----

async def test_open_a_resumed_stopped_run_reads_its_state(tmp_path: Path) -> None:
    app = open_app(resumed_stopped_run(tmp_path), tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        status = str(app.query_one(StatusBar).content)
        assert "round 4/4" in status and "stopped" in status and "(r3)" in status, status
        assert app.model.best_round == 3
        tree = app.query_one(RoundsPane)
        labels = {n: str(node.label) for n, node in tree._round_nodes.items()}
        assert "★" in labels[3] and "★" not in labels[4], labels
        assert "…" not in labels[5] and "■" in labels[5], "the cancelled round is not running"
        assert app.model.get(5).status == "stopped"  # type: ignore[union-attr]
        entries = app.log_pane.entries
        assert any("keeps no session.log" in e for e in entries), entries
        assert any("round 5 (optimize): not finished" in e for e in entries)
        assert any("round 3 (repair): ok" in e for e in entries)


async def test_open_shows_the_session_log_kept_in_the_run_folder(tmp_path: Path) -> None:
    run = resumed_stopped_run(tmp_path)
    (run / "session.log").write_text("06:01:02 round 4: ok, 0.39x\n06:01:09 session stopped (cancelled)\n")
    app = open_app(run, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert any("round 4: ok, 0.39x" in e for e in app.log_pane.entries)
        assert any("session stopped (cancelled)" in e for e in app.log_pane.entries)
        assert not any("keeps no session.log" in e for e in app.log_pane.entries)


async def test_enter_opens_a_round_and_repair_rounds_say_repair(tmp_path: Path) -> None:
    app = open_app(FIXTURE_RUN, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        tree = app.query_one(RoundsPane)
        await select_round(pilot, app, 1)
        await pilot.press("enter")
        await pilot.pause()
        assert app.selected == 1 and tree._round_nodes[1].is_expanded, "Enter opened round 1, its branch stays"
        assert tree._round_nodes[2].parent is tree._round_nodes[1]
        await pilot.press("enter")
        assert tree._round_nodes[1].is_expanded
        await select_round(pilot, app, 2)
        header = str(app.judge_pane.query_one("#judge-header").content)
        assert "· repair ·" in header and "· correct ·" not in header, header
        assert "repair" in str(tree._round_nodes[2].label)


# ---- editing keeps work (manual mode: no LLM, the heuristic Judge) ----

async def test_manual_mode_starts_from_the_tasks_skeleton_and_ctrl_end_goes_to_the_end(
        tmp_path: Path, cache_dir: Path) -> None:
    app = task_app(tmp_path, write_config(tmp_path, cache_dir, None, rounds=2))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, pending_point(app, "candidate", 1), what="the manual candidate step")
        await pilot.press("e")
        text = app.source_pane.text
        assert "class ModelNew(nn.Module):" in text
        assert "def __init__(self, cols):" in text, "Model.__init__'s signature (what get_init_inputs feeds)"
        assert "def forward(self, x):" in text, "Model.forward's arguments"
        assert "# _ext = load_inline(name=" in text and "cpp_sources=" in text, "a commented stub in the cpu format"
        editor = app.source_pane.editor
        await pilot.press("ctrl+end")
        await pilot.press("#", " ", "e", "n", "d")
        assert app.source_pane.text.rstrip().endswith("# end"), "typed text lands at the end"
        await pilot.press("ctrl+home")
        assert editor.cursor_location == (0, 0)
        await pilot.press("#", " ", "t", "o", "p", "enter")
        assert app.source_pane.text.startswith("# top\n")
        await pilot.press("escape", "s")
        await wait_until(pilot, lambda: app.model.stopped is not None, what="the stop")


def test_the_skeleton_follows_the_task_and_the_format() -> None:
    task = ("import torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self, in_features: int, out=8):\n"
            "        super().__init__()\n\n    def forward(self, a, b, *, scale=1.0):\n        return a\n")
    for fmt, needle in (("inline", "cuda_sources=CUDA_SOURCE"), ("nvrtc", "load_kernel(SOURCE"),
                        ("triton", "@triton.jit"), ("cpu", "cpp_sources=CPP_SOURCE")):
        text = manual_skeleton(task, fmt, round=3)
        compile(text, "skeleton.py", "exec")  # it parses as it stands
        assert "def __init__(self, in_features: int, out=8):" in text
        assert "def forward(self, a, b, *, scale=1.0):" in text
        assert needle in text and f"round 3 ({fmt} format)" in text
    assert "def __init__(self):" in manual_skeleton("class Model:\n    def forward(self, x):\n        return x\n", "cpu")


async def test_a_candidate_loads_from_a_file_and_errors_are_shown(tmp_path: Path, cache_dir: Path) -> None:
    (tmp_path / "mine.py").write_text(CORRECT)
    (tmp_path / "nomodel.py").write_text("x = 1\n")
    app = task_app(tmp_path, write_config(tmp_path, cache_dir, None, rounds=1))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, pending_point(app, "candidate", 1), what="the manual candidate step")
        await pilot.press("i")
        assert isinstance(app.screen, LoadFileScreen)
        field = app.screen.query_one("#load-path", Input)
        for path, expected in (("nothere.py", "nothere.py"), ("nomodel.py", "ModelNew")):
            field.value = path
            await pilot.press("enter")
            assert isinstance(app.screen, LoadFileScreen), "a bad file keeps the prompt open"
            error = str(app.screen.query_one("#load-error", Static).content)
            assert expected in error, error
        field.value = "mine.py"
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, LoadFileScreen)
        assert app.source_pane.text == CORRECT and app.source_pane.editing
        assert app._edited(), "the loaded file is the pending edit: a approves it"
        await pilot.press("escape", "s")
        await wait_until(pilot, lambda: app.model.stopped is not None, what="the stop")


async def test_branching_asks_before_discarding_a_typed_recommendation_and_the_cursor_stays(
        tmp_path: Path, cache_dir: Path) -> None:
    app = task_app(tmp_path, write_config(tmp_path, cache_dir, None, rounds=3, judge="heuristic"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, pending_point(app, "candidate", 1), what="the manual candidate step")
        await pilot.press("e")
        app.source_pane.editor.load_text(CORRECT)
        await pilot.press("escape", "a")
        await wait_until(pilot, pending_point(app, "recommendation", 2), timeout=300, what="round 2's recommendation")
        await pilot.press("w")
        await pilot.press("u", "s", "e", " ", "s", "i", "m", "d")
        assert app.judge_pane.text == "use simd"
        await pilot.press("escape")
        await select_round(pilot, app, 1)
        await pilot.press("b")
        assert isinstance(app.screen, ConfirmScreen), "branching would discard the typed recommendation: it asks"
        await pilot.press("n")
        assert app._pending("recommendation") is not None and app.judge_pane.typed_for(2) == "use simd"
        await select_round(pilot, app, 2)
        assert app.judge_pane.text == "use simd", "the typed text is still there on its round"
        await select_round(pilot, app, 1)
        await pilot.press("b")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await wait_until(pilot, pending_point(app, "candidate", 2), what="round 2's candidate, built on round 1")
        await pilot.pause()
        tree = app.query_one(RoundsPane)
        assert app.selected == 1 and tree.cursor_node is not None and tree.cursor_node.data == 1, \
            "after b the tree cursor stays on the round the person chose"
        await pilot.press("s")
        await wait_until(pilot, lambda: app.model.stopped is not None, what="the stop")
