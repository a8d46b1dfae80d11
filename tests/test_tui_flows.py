"""Pilot flows of the workbench on the CPU device: the real Session and evaluator, the Coder and Judge
answered by the scripted LLM server through the real openai SDK. Each test is one thing a person does."""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path

import pytest
from cudaforge.engine.session import NO_LLM_NOTICE, RunStore
from cudaforge.tui.app import WorkbenchApp, main
from cudaforge.tui.cli import LaunchSpec
from cudaforge.tui.screens.confirm import ConfirmScreen
from cudaforge.tui.screens.help import HelpScreen
from cudaforge.tui.screens.settings import SettingsScreen
from cudaforge.tui.widgets.footer import KeyFooter
from cudaforge.tui.widgets.rounds import RoundsPane
from llm_server import ScriptedLLMServer
from session_kit import CORRECT, KEY, KEY_ENV, WRONG, coder_reply, judge_correct_reply, judge_optimize_reply
from textual.command import CommandList
from textual.widgets import Input
from tui_kit import (
    FIXTURE_RUN,
    SIZE,
    pending_point,
    round_finished,
    slow,
    task_app,
    unique,
    wait_until,
    write_config,
)

TESTS = Path(__file__).parent


@pytest.fixture(autouse=True)
def _llm_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


def run_dir(app: WorkbenchApp) -> Path:
    assert app.model.run_dir, "the session never started"
    return Path(app.model.run_dir)


async def test_approve_a_round_and_measure_key_latency(tmp_path: Path, cache_dir: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    cand = unique(slow(CORRECT, 0.1), "fresh evaluation")  # not a cached result: the round really runs
    with ScriptedLLMServer([coder_reply(cand)]) as server:
        app = task_app(tmp_path, write_config(tmp_path, cache_dir, server, rounds=1))
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, pending_point(app, "candidate", 1), what="the Coder's candidate")
            assert "fresh evaluation" in app.source_pane.text
            assert app.query_one("#decision").display
            assert "a" in [str(k.key) for k in app.query_one(KeyFooter).query("FooterKey")], "a session: decision keys"
            app.latency.samples_ms.clear()
            await pilot.press("a")
            presses = 0
            while not round_finished(app, 1)() and presses < 400:  # keep using the UI while the round runs
                await pilot.press(("2", "3", "4", "5", "6", "1", "0", "up", "down")[presses % 9])
                presses += 1
            await wait_until(pilot, round_finished(app, 1), what="round 1 to finish")
            await wait_until(pilot, lambda: app.model.stopped is not None, what="the session to stop")
            assert app.model.get(1).status == "ok"  # type: ignore[union-attr]
            assert not app.query_one("#decision").display
            assert app.model.best_round == 1
        with capsys.disabled():
            print(f"\n[tui latency] {app.latency.summary()} (while round 1 compiled, verified and timed)")
    assert len(app.latency.samples_ms) == presses + 1, "one sample per key press ('a' and the presses)"
    store = RunStore.open(run_dir(app), read_only=True)
    rec = store.load_round(1)
    assert rec.origin == "coder" and rec.result is not None and rec.result.outcome == "ok"
    assert store.state.stop_reason == "max_rounds"
    assert [d.action for d in rec.decisions] == ["approve"]


async def test_edit_a_candidate_in_place_and_run_it(tmp_path: Path, cache_dir: Path) -> None:
    with ScriptedLLMServer([coder_reply(CORRECT)]) as server:
        app = task_app(tmp_path, write_config(tmp_path, cache_dir, server, rounds=1))
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, pending_point(app, "candidate", 1), what="the Coder's candidate")
            await pilot.press("e")
            editor = app.source_pane.editor
            assert not editor.read_only and app.focused is editor
            editor.move_cursor(editor.document.end)
            await pilot.press("enter", *"# tuned by hand")
            await pilot.press("escape")
            assert editor.read_only and app.source_pane.changed
            assert "edited" in str(app.query_one("#decision-prompt").render())
            await pilot.press("a")
            await wait_until(pilot, round_finished(app, 1), what="the edited candidate's round")
            assert app.model.get(1).origin == "edited"  # type: ignore[union-attr]
    rec = RunStore.open(run_dir(app), read_only=True).load_round(1)
    assert rec.origin == "edited" and rec.candidate is not None and rec.candidate.rstrip().endswith("# tuned by hand")
    assert rec.result is not None and rec.result.outcome == "ok"


async def test_edit_the_judges_recommendation(tmp_path: Path, cache_dir: Path) -> None:
    script = [coder_reply(CORRECT), judge_optimize_reply("vectorize the loop"), coder_reply(CORRECT)]
    with ScriptedLLMServer(script) as server:
        app = task_app(tmp_path, write_config(tmp_path, cache_dir, server, rounds=2))
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, pending_point(app, "candidate", 1), what="round 1's candidate")
            await pilot.press("a")
            await wait_until(pilot, pending_point(app, "recommendation", 2), what="the Judge's recommendation")
            assert "vectorize the loop" in app.judge_pane.shown_text
            r1 = app.model.get(1)  # its cost came with RoundFinished; the App reads no call log
            assert r1 is not None and r1.finished and r1.tokens > 0 and r1.cost_usd > 0
            await pilot.press("e")
            editor = app.judge_pane.editor
            assert editor.display and not editor.read_only
            editor.move_cursor(editor.document.end)
            await pilot.press("enter", *"Also unroll by 4.")
            await pilot.press("escape", "a")
            await wait_until(pilot, pending_point(app, "candidate", 2), what="the Coder's answer to the edit")
            coder_prompt = server.requests[-1].last_user_text
            assert "Also unroll by 4." in coder_prompt and "vectorize the loop" in coder_prompt
            await pilot.press("s")
            await wait_until(pilot, lambda: app.model.stopped is not None, what="the stop")
            assert app.model.stopped.reason == "stopped_by_user"  # type: ignore[union-attr]
    rec = json.loads((run_dir(app) / "rounds" / "002" / "recommendation.json").read_text())
    assert rec["source"] == "person" and rec["text"].endswith("Also unroll by 4.")


async def test_regenerate_the_coders_candidate(tmp_path: Path, cache_dir: Path) -> None:
    with ScriptedLLMServer([coder_reply(WRONG), coder_reply(CORRECT)]) as server:
        app = task_app(tmp_path, write_config(tmp_path, cache_dir, server, rounds=1))
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, pending_point(app, "candidate", 1), what="the first draft")
            assert "0.5, 0.01)" in app.source_pane.text
            await pilot.press("r")
            await wait_until(pilot, lambda: pending_point(app, "candidate", 1)() and "0.5, 0.0)"
                             in app.source_pane.text, what="the regenerated draft")
            await pilot.press("a")
            await wait_until(pilot, round_finished(app, 1), what="round 1")
            assert app.model.get(1).status == "ok"  # type: ignore[union-attr]
        assert len(server.requests) == 2
    rec = RunStore.open(run_dir(app), read_only=True).load_round(1)
    assert rec.coder_drafts == 2 and [d.action for d in rec.decisions] == ["regenerate", "approve"]


async def test_branch_from_an_earlier_round(tmp_path: Path, cache_dir: Path) -> None:
    script = [coder_reply(CORRECT), judge_optimize_reply(), coder_reply(WRONG),
              judge_correct_reply("outputs are off by 0.01"), judge_optimize_reply("start again from round 1")]
    with ScriptedLLMServer(script) as server:
        app = task_app(tmp_path, write_config(tmp_path, cache_dir, server, rounds=3))
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, pending_point(app, "candidate", 1), what="round 1's candidate")
            await pilot.press("a")
            await wait_until(pilot, pending_point(app, "recommendation", 2), what="round 2's recommendation")
            await pilot.press("a")
            await wait_until(pilot, pending_point(app, "candidate", 2), what="round 2's candidate")
            await pilot.press("a")
            await wait_until(pilot, pending_point(app, "recommendation", 3), what="round 3's recommendation")
            assert app.model.get(2).status == "wrong_result"  # type: ignore[union-attr]
            assert app.model.get(3).parent == 2  # type: ignore[union-attr]
            app.query_one(RoundsPane).focus()
            await pilot.press("up", "up")
            assert app.selected == 1
            await pilot.press("b")
            await wait_until(pilot, lambda: pending_point(app, "recommendation", 3)()
                             and app.model.get(3).subject_round == 1,  # type: ignore[union-attr]
                             what="the Judge's recommendation about round 1")
            assert app.model.get(3).parent == 1  # type: ignore[union-attr]
            tree = app.query_one(RoundsPane)
            await pilot.pause()
            assert tree._round_nodes[3].parent is tree._round_nodes[1], "round 3 nests under round 1"
            assert "start again from round 1" in app.judge_pane.shown_text
            await pilot.press("s")
            await wait_until(pilot, lambda: app.model.stopped is not None, what="the stop")
    meta = json.loads((run_dir(app) / "rounds" / "003" / "round.json").read_text())
    assert meta["parent"] == 1 and meta["kind"] == "optimize"


async def test_quit_during_a_round_asks_and_the_run_resumes(tmp_path: Path, cache_dir: Path) -> None:
    cand = unique(slow(CORRECT), "quit and resume")
    with ScriptedLLMServer([coder_reply(cand)]) as server:
        app = task_app(tmp_path, write_config(tmp_path, cache_dir, server, rounds=1))
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, pending_point(app, "candidate", 1), what="round 1's candidate")
            await pilot.press("a")
            await wait_until(pilot, lambda: app.model.busy, what="the evaluation to start")
            await pilot.press("ctrl+q")
            assert isinstance(app.screen, ConfirmScreen), "quitting a running round asks first"
            await pilot.press("n")
            assert not isinstance(app.screen, ConfirmScreen) and app.is_running
            await pilot.press("ctrl+q")
            await pilot.press("y")
        folder = run_dir(app)
        state = json.loads((folder / "state.json").read_text())
        assert state["status"] == "stopped" and state["stop_reason"] == "cancelled"
        assert (folder / "rounds" / "001" / "candidate.py").exists()
        assert not RunStore(folder, read_only=True).is_live(), "the run folder is released"

        resumed = WorkbenchApp(LaunchSpec(resume=str(folder), use_user_config=False), system_stats=False,
                               cwd=tmp_path)
        async with resumed.run_test(size=SIZE) as pilot:
            await wait_until(pilot, round_finished(resumed, 1), what="round 1 after resuming")
            await wait_until(pilot, lambda: resumed.model.stopped is not None, what="the resumed session's end")
            assert resumed.model.get(1).status == "ok"  # type: ignore[union-attr]
            assert "quit and resume" in (resumed.model.get(1).candidate or "")  # type: ignore[union-attr]
            assert any("resumed" in e for e in resumed.log_pane.entries)
        assert len(server.requests) == 1, "resuming did not ask the Coder again"


async def test_pause_in_auto_mode(tmp_path: Path, cache_dir: Path) -> None:
    # The Coder takes 3 s: `p` lands while it thinks (the Session runs on its own thread, so without
    # the delay the round could be over before the key arrives).
    with ScriptedLLMServer([dataclasses.replace(coder_reply(CORRECT), delay_s=3.0)]) as server:
        app = task_app(tmp_path, write_config(tmp_path, cache_dir, server, rounds=2), mode="auto")
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: app.model.mode == "auto", what="the session (in auto mode)")
            await pilot.press("p")
            await wait_until(pilot, lambda: app._pending() is not None, what="the first decision point after pausing")
            assert app.model.mode == "review" and app.query_one("#decision").display
            assert any("pause requested" in e for e in app.log_pane.entries)
            await pilot.press("s")
            await wait_until(pilot, lambda: app.model.stopped is not None, what="the stop")


async def test_manual_mode_without_any_llm_and_a_remapped_key(tmp_path: Path, cache_dir: Path) -> None:
    from cudaforge.tui.widgets.tabs import PaneTabs

    cfg = write_config(tmp_path, cache_dir, None, rounds=2, keymap={"approve": "y", "show_log": "f6"})
    app = task_app(tmp_path, cfg)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, pending_point(app, "candidate", 1), what="the manual candidate step")
        assert "f6 Log" in str(app.query_one(PaneTabs).content), "the pane strip shows the remapped key"
        assert app.model.mode == "manual" and NO_LLM_NOTICE in app.banner_text
        assert app._pending().options == ("edit", "branch", "stop")  # type: ignore[union-attr]
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen) and app.keys["approve"] == "y"
        await pilot.press("escape")
        await pilot.press("y")  # nothing written yet: refused with a message, the step still waits
        assert app._pending("candidate") is not None
        await pilot.press("e")
        assert "ModelNew" in app.source_pane.text, "a template to start from"
        app.source_pane.editor.load_text(CORRECT)  # the person pastes their module
        await pilot.press("escape", "a")  # the old key does nothing now
        assert app._pending("candidate") is not None
        await pilot.press("y")
        await wait_until(pilot, pending_point(app, "recommendation", 2), what="the heuristic Judge")
        assert app.model.get(1).status == "ok" and app.model.get(1).origin == "person"  # type: ignore[union-attr]
        assert app.model.get(2).judge_source == "heuristic"  # type: ignore[union-attr]
        await pilot.press("s")
        await wait_until(pilot, lambda: app.model.stopped is not None, what="the stop")


async def test_settings_are_saved_with_comments_kept(tmp_path: Path, cache_dir: Path) -> None:
    cfg = write_config(tmp_path, cache_dir, None, rounds=2)
    before = cfg.read_text()
    app = WorkbenchApp(LaunchSpec(open_run=str(FIXTURE_RUN), config_file=str(cfg), use_user_config=False),
                       system_stats=False, cwd=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f2")
        assert isinstance(app.screen, SettingsScreen)
        app.screen.query_one("#set-session-rounds", Input).value = "0"
        await pilot.press("ctrl+s")
        assert isinstance(app.screen, SettingsScreen), "a bad value keeps the screen open"
        assert "at least 1" in str(app.screen.query_one("#settings-error").render())
        assert cfg.read_text() == before, "nothing is written when a value is bad"
        app.screen.query_one("#set-session-rounds", Input).value = "7"
        app.screen.query_one("#set-coder-provider", Input).value = "anthropic"
        app.screen.query_one("#set-coder-model", Input).value = "claude-sonnet-4-6"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert not isinstance(app.screen, SettingsScreen)
        assert any("settings saved" in e for e in app.log_pane.entries)
    after = cfg.read_text()
    data = tomllib.loads(after)
    assert data["session"]["rounds"] == 7
    assert data["coder"] == {"provider": "anthropic", "model": "claude-sonnet-4-6"}
    for line in before.splitlines():
        if line.startswith("#") or "# " in line and not line.startswith("rounds"):
            assert line in after, f"comment line lost: {line!r}"
    assert "rounds = 7             # rounds per session" in after


async def test_a_bad_task_is_shown_as_an_error(tmp_path: Path, cache_dir: Path) -> None:
    cfg = write_config(tmp_path, cache_dir, None)
    bad = TESTS / "tasks" / "bad" / "syntax_error.py"
    app = task_app(tmp_path, cfg, task=bad)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.banner_text.startswith("Error"), what="the error message")
        assert "syntax_error.py" in app.banner_text
        assert app.is_running and app.session is None
        assert any("syntax_error.py" in e for e in app.log_pane.entries)
    assert app.exit_code == 2

    missing = WorkbenchApp(LaunchSpec(task=str(bad), config_file=str(tmp_path / "nope.toml"),
                                      use_user_config=False), system_stats=False, cwd=tmp_path)
    async with missing.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: "config file not found" in missing.banner_text, what="the config error")


def test_usage_errors_exit_2_before_the_app_starts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "exactly one of TASK" in capsys.readouterr().err
    assert main(["task.py", "--open", "runs/x"]) == 2
    assert main(["task.py", "--mode", "turbo"]) == 2


async def test_command_palette_runs_any_action(tmp_path: Path) -> None:
    app = WorkbenchApp(LaunchSpec(open_run=str(FIXTURE_RUN), use_user_config=False), system_stats=False,
                       cwd=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.selected == 3
        await pilot.press("ctrl+p")
        await pilot.press(*"diff")
        await wait_until(pilot, lambda: any(c.option_count for c in app.screen.query(CommandList)), timeout=10,
                         what="palette hits")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.source_pane.diff_mode == "previous", timeout=10, what="the diff")
        diff = str(app.query_one("#source-diff").render())
        assert "round 2" in diff and "0.01" in diff
        footer = [str(k.key) for k in app.query_one(KeyFooter).query("FooterKey")]
        assert "d" in footer and not {"a", "e", "r", "b", "s"} & set(footer), "read-only: no decision keys"
        await pilot.press("a")  # read-only: the key does nothing, and nothing breaks
        assert app.is_running and app.model.pending is None


RECORDED_H200_RUN = Path(__file__).resolve().parent.parent / "examples" / "recorded" / "20261201-032158-softmax-1c92"


async def test_the_recorded_h200_run_opens_read_only_in_every_pane(tmp_path: Path) -> None:
    """The run shipped in examples/ (H200, scripted LLM replies) browses without a GPU or an API key."""
    before = {p: p.read_bytes() for p in RECORDED_H200_RUN.rglob("*") if p.is_file()}
    app = WorkbenchApp(LaunchSpec(open_run=str(RECORDED_H200_RUN), use_user_config=False), system_stats=False,
                       cwd=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        m = app.model
        assert sorted(m.rounds) == [1, 2, 3, 4]
        assert [m.rounds[n].status for n in (1, 2, 3, 4)] == ["compile_error", "ok", "ok", "ok"]
        assert m.best_round == 3 and m.gpu_name.startswith("NVIDIA H200")
        assert app.selected == 4  # opens on the latest round
        app.selected = 3
        app._refresh_all()
        await pilot.press("4")  # NCU metrics of the best round, measured on the H200
        await pilot.pause()
        assert "dram" in app.export_screenshot().lower()
        await pilot.press("3")
        await pilot.pause()
        assert "max abs" in app.export_screenshot().replace("&#160;", " ").lower()
        app.selected = 1
        app._refresh_all()
        await pilot.press("2")  # the compiler pane of the round that did not build
        await pilot.pause()
        assert "cf_softmax_rows.cu(46)" in app.export_screenshot()  # NVRTC's log from the H200 run
        await pilot.press("a")  # read-only: a message, nothing runs
        assert app.is_running
    after = {p: p.read_bytes() for p in RECORDED_H200_RUN.rglob("*") if p.is_file()}
    assert after == before, "opening a run read-only must not change it"


async def test_the_pane_strip_names_each_pane_with_its_key_and_a_click_opens_it(tmp_path: Path) -> None:
    from cudaforge.tui.widgets.tabs import PANES, PaneTabs

    app = WorkbenchApp(LaunchSpec(open_run=str(FIXTURE_RUN), use_user_config=False), system_stats=False,
                       cwd=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        strip = app.query_one(PaneTabs)
        text = str(strip.content)
        assert "1 Source" in text and "4 NCU" in text and "6 Log" in text
        shown = [name for name in PANES if app.query_one(f"#{name}").display]
        assert shown == ["source"] and strip.active == "source"
        column = text.index("Compiler")
        await pilot.click(PaneTabs, offset=(column, 0))
        await pilot.pause()
        assert strip.active == "compiler"
        assert [name for name in PANES if app.query_one(f"#{name}").display] == ["compiler"]
        await pilot.press("5")
        assert strip.active == "judge" and app.query_one("#judge").display and not app.query_one("#compiler").display
