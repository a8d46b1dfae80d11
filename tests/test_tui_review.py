"""The Review pane in a Pilot flow on the CPU device: an honest round trips a lowered `[hold] speedup`
and is held; the pane shows its case (why held, findings, speed of light, timers, the fresh-worker
re-run, outputs); rejecting keeps the previous best, accepting makes the held round best, and the
rulings are in the run folder and back in the workbench after resume."""

from __future__ import annotations

from pathlib import Path

import pytest
from cudaforge.engine.session.rulings import read_rulings
from cudaforge.tui.app import WorkbenchApp
from cudaforge.tui.cli import LaunchSpec
from cudaforge.tui.widgets.review import ReviewPane
from cudaforge.tui.widgets.rounds import RoundsPane
from cudaforge.tui.widgets.tabs import PaneTabs
from llm_server import ScriptedLLMServer
from session_kit import CORRECT, KEY, KEY_ENV, SLOW, coder_reply, judge_optimize_reply
from textual.widgets import Static
from tui_kit import SIZE, pending_point, task_app, unique, wait_until, write_config

pytestmark = pytest.mark.timeout(840)

# CORRECT runs the kernel once, SLOW 200 times: between their speedups, only CORRECT rounds are held.
HOLD = "\n[hold]\nspeedup = 0.05          # low enough that an honest CPU round is held\n"


@pytest.fixture(autouse=True)
def _llm_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


def _review_text(app: WorkbenchApp) -> str:
    return str(app.query_one("#review-body", Static).content)


def _held_and_rerun(app: WorkbenchApp, n: int) -> bool:
    v = app.model.get(n)
    return v is not None and v.finished and bool(v.hold) and v.rerun is not None


async def _select(pilot, app: WorkbenchApp, n: int) -> None:  # type: ignore[no-untyped-def]
    """Move the round tree's cursor onto round n with the arrow keys, as a person does (the tree's cursor
    decides the direction: the selection follows the live round only while the person follows it)."""
    tree = app.query_one(RoundsPane)
    tree.focus()
    await pilot.pause()
    for _ in range(12):
        if tree.cursor_node is not None and tree.cursor_node.data == n:
            break
        current = tree.cursor_node.data if tree.cursor_node is not None else None
        await pilot.press("up" if current is None or current > n else "down")
        await pilot.pause()
    await pilot.pause()
    cursor = tree.cursor_node.data if tree.cursor_node is not None else None
    assert app.selected == n, f"could not select round {n} in the tree (selected: {app.selected}, cursor: {cursor})"


async def test_a_held_round_is_ruled_in_the_review_pane(tmp_path: Path, cache_dir: Path) -> None:
    script = [coder_reply(unique(SLOW, "review r1")), judge_optimize_reply(), coder_reply(unique(CORRECT, "review r2")),
              judge_optimize_reply(), coder_reply(unique(CORRECT, "review r3")), judge_optimize_reply()]
    with ScriptedLLMServer(script) as server:
        config = write_config(tmp_path, cache_dir, server, rounds=4)
        config.write_text(config.read_text() + HOLD)
        app = task_app(tmp_path, config)
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, pending_point(app, "candidate", 1), what="round 1's candidate")
            await pilot.press("a")
            for n in (2, 3):
                await wait_until(pilot, pending_point(app, "recommendation", n), timeout=300,
                                 what=f"round {n}'s recommendation")
                await pilot.press("a")
                await wait_until(pilot, pending_point(app, "candidate", n), what=f"round {n}'s candidate")
                await pilot.press("a")
            await wait_until(pilot, pending_point(app, "recommendation", 4), timeout=300, what="round 4's recommendation")
            await wait_until(pilot, lambda: _held_and_rerun(app, 2) and _held_and_rerun(app, 3), what="the holds")
            assert app.model.best_round == 1 and app.model.get(1).hold == ()  # type: ignore[union-attr]
            assert app.model.get(3).parent == 1 and app.model.get(4).parent == 1  # type: ignore[union-attr]
            assert app.model.held() == [2, 3]

            # the case of round 2
            await _select(pilot, app, 2)
            await pilot.press("7")
            assert app.query_one(PaneTabs).active == "review" and app.query_one(ReviewPane).display
            text = _review_text(app)
            for part in ("held for review: r2, r3", "round 2", "HELD FOR REVIEW", "at or above [hold] speedup 0.05x",
                         "findings:", "speed of light:", "FlopCounterMode", "no GPU spec on the CPU device",
                         "timers (first run and the re-run", "first :", "re-run:", "output comparison:",
                         "trials passed"):
                assert part in text, (part, text)
            # reject with a reason: the previous best stays
            await pilot.click("#review-reason")
            await pilot.press(*"timer looks off", "enter")
            await pilot.press("x")
            await wait_until(pilot, lambda: app.model.get(2).ruling is not None, what="the rejection")  # type: ignore[union-attr]
            assert app.model.best_round == 1
            assert "RULED: reject" in _review_text(app) and "timer looks off" in _review_text(app)
            assert "held" not in str(app.query_one(RoundsPane)._round_nodes[2].label)
            assert "rejected" in str(app.query_one(RoundsPane)._round_nodes[2].label)
            # accept round 3: it becomes best
            await _select(pilot, app, 3)
            await pilot.press("y")
            await wait_until(pilot, lambda: app.model.get(3).ruling is not None, what="the acceptance")  # type: ignore[union-attr]
            await wait_until(pilot, lambda: app.model.best_round == 3, what="round 3 as best")
            assert "★" in str(app.query_one(RoundsPane)._round_nodes[3].label)
            await pilot.press("y")  # a second ruling on the same round is refused
            await pilot.press("s")
            await wait_until(pilot, lambda: app.model.stopped is not None, what="the stop")
        folder = Path(app.model.run_dir)
        rulings = read_rulings(folder)
        assert (rulings[2].ruling, rulings[2].reason) == ("reject", "timer looks off")
        assert rulings[3].ruling == "accept" and rulings[3].who
        assert len((folder / "rulings.jsonl").read_text().splitlines()) == 2

        resumed = WorkbenchApp(LaunchSpec(resume=str(folder), use_user_config=False), system_stats=False, cwd=tmp_path)
        async with resumed.run_test(size=SIZE) as pilot:
            await wait_until(pilot, pending_point(resumed, "recommendation", 4), what="round 4 after resuming")
            assert resumed.model.best_round == 3
            assert resumed.model.get(2).ruling.ruling == "reject"  # type: ignore[union-attr]
            assert resumed.model.get(3).ruling.ruling == "accept"  # type: ignore[union-attr]
            assert resumed.model.held() == []
            await _select(pilot, resumed, 2)
            await pilot.press("7")
            assert "RULED: reject" in _review_text(resumed)
            await pilot.press("s")
            await wait_until(pilot, lambda: resumed.model.stopped is not None, what="the stop")
