"""SVG snapshots of every pane in each state, from a recorded run folder browsed read-only:
round 1 a compile error, round 2 a wrong result, round 3 correct with (real H200) NCU metrics.
See tests/fixtures/tui_run/generate.py for how the run was recorded."""

from __future__ import annotations

from pathlib import Path

import pytest
import textual
from cudaforge.tui.app import WorkbenchApp
from cudaforge.tui.cli import LaunchSpec
from tui_kit import FIXTURE_RUN, SIZE, assert_snapshot, recorded_textual_version

pytestmark = pytest.mark.skipif(
    recorded_textual_version() not in (None, textual.__version__),
    reason=f"snapshots were recorded with textual {recorded_textual_version()}, this is {textual.__version__}: "
           "re-record with UPDATE_SNAPSHOTS=1",
)

CASES = [
    # (name, round, pane key)
    ("r1_compile_error_source", 1, "1"),
    ("r1_compile_error_compiler", 1, "2"),
    ("r1_compile_error_correctness", 1, "3"),
    ("r2_wrong_result_correctness", 2, "3"),
    ("r2_wrong_result_judge", 2, "5"),
    ("r3_correct_correctness", 3, "3"),
    ("r3_correct_metrics", 3, "4"),
    ("r3_correct_judge", 3, "5"),
    ("r3_correct_review", 3, "7"),
]


def browse_app() -> WorkbenchApp:
    return WorkbenchApp(LaunchSpec(open_run=str(FIXTURE_RUN), use_user_config=False), system_stats=False,
                        cwd=FIXTURE_RUN.parent)


@pytest.mark.parametrize(("name", "round", "key"), CASES, ids=[c[0] for c in CASES])
async def test_pane_snapshot(name: str, round: int, key: str, tmp_path: Path) -> None:
    app = browse_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert sorted(app.model.rounds) == [1, 2, 3]
        app.query_one("#rounds").focus()
        if round < 3:
            await pilot.press(*(["up"] * (3 - round)))
        assert app.selected == round
        await pilot.press(key)
        await pilot.pause()
        app.query_one("#rounds").focus()  # no blinking text cursor in the picture
        await pilot.pause()
        assert_snapshot(app, name, tmp_path)


async def test_panes_show_each_state() -> None:
    """What the snapshots show, as text: the states are told apart by the panes, not only by colour."""
    app = browse_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        compiler = app.query_one("#compiler")
        source = app.source_pane
        app.selected = 1
        app._show_round(1)
        await pilot.pause()
        assert compiler.errors, "the compile error's lines are marked"
        assert "expected ';'" in compiler.log_text or "expected" in compiler.log_text
        row, _ = source.editor.selection.end
        assert "return x * 2" in source.editor.document.get_line(row), "the failing line is selected"
        await pilot.press("n")
        assert compiler.current is not None
        first = compiler.current
        await pilot.press("N")
        assert compiler.current == (first - 1) % len(compiler.errors)
        r2 = app.model.get(2)
        assert r2 is not None and r2.result is not None and r2.result.outcome == "wrong_result"
        worst = r2.result.correctness.outputs[0].worst  # type: ignore[union-attr]
        assert worst and abs(worst[0].got - worst[0].expected) == pytest.approx(0.01, abs=1e-3)
        r3 = app.model.get(3)
        assert r3 is not None and r3.profile is not None and r3.analysis is not None
        assert app.model.best_round == 3
