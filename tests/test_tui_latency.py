"""The parts of the workbench that keep key presses fast (the figures are printed by the Pilot and
tmux latency tests; nothing gates on them): one probe sample per press, the frozen heap, a footer that
is rebuilt only when its keys change, panes that skip redraws of unchanged content."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from cudaforge.tui.app import WorkbenchApp
from cudaforge.tui.cli import LaunchSpec
from cudaforge.tui.collector import HeapFreezer
from cudaforge.tui.latency import LatencyProbe
from cudaforge.tui.widgets.footer import KeyFooter
from cudaforge.tui.widgets.rounds import RoundsPane
from cudaforge.tui.widgets.status import StatusBar
from tui_kit import FIXTURE_RUN, SIZE

PANE_KEYS = ("2", "3", "4", "5", "6", "1", "0", "down", "up")
RECORDED = next((Path(__file__).parent.parent / "examples" / "recorded").iterdir())  # a run with NCU profiles


def test_the_probe_keeps_one_sample_per_key_press_the_later_sighting() -> None:
    probe = LatencyProbe()
    first, second = object(), object()
    now = time.monotonic()
    probe.record("2", now - 0.001, first)  # before the focused widget handed the key back
    probe.record("3", now - 0.010, second)
    probe.record("2", now - 0.050, first)  # after the action ran
    assert [k for k, _ in probe.samples_ms] == ["2", "3"]
    assert probe.samples_ms[0][1] >= 50.0
    probe.samples_ms.clear()  # what the latency test does before its presses
    probe.record("2", now, first)
    assert len(probe.samples_ms) == 1


def test_the_heap_freezer_freezes_after_imports_and_gives_the_heap_back() -> None:
    assert gc.get_freeze_count() == 0
    heap = HeapFreezer()
    try:
        heap.freeze()
        frozen = gc.get_freeze_count()
        assert frozen > 0
        heap.after_imports()  # nothing imported since: nothing to do
        assert gc.get_freeze_count() == frozen
        sys.modules["_cudaforge_test_late_import"] = types.ModuleType("_cudaforge_test_late_import")
        keep = [[i] for i in range(1000)]  # objects alive since the last freeze
        heap.after_imports()
        assert gc.get_freeze_count() >= frozen + len(keep)
    finally:
        sys.modules.pop("_cudaforge_test_late_import", None)
        heap.stop()
    assert gc.get_freeze_count() == 0


def browse_app() -> WorkbenchApp:
    return WorkbenchApp(LaunchSpec(open_run=str(FIXTURE_RUN), use_user_config=False), system_stats=False,
                        cwd=FIXTURE_RUN.parent)


async def test_switching_panes_does_not_rebuild_the_footer_but_a_new_key_does() -> None:
    app = browse_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        footer = app.query_one(KeyFooter)
        keys_before = [str(k.key) for k in footer.query("FooterKey")]
        assert "d" in keys_before
        rebuilt = 0
        original = footer.recompose

        async def counting_recompose() -> None:
            nonlocal rebuilt
            rebuilt += 1
            await original()

        footer.recompose = counting_recompose  # type: ignore[method-assign]
        await pilot.press("2", "3", "5", "6", "1", "0")  # each one moves the focus
        await pilot.pause()
        assert rebuilt == 0
        app.set_keymap({"diff": "y"})
        app.refresh_bindings()
        await pilot.pause()
        assert rebuilt >= 1
        assert "y" in [str(k.key) for k in footer.query("FooterKey")]


async def test_engine_events_that_change_nothing_redraw_nothing() -> None:
    app = browse_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        tree = app.query_one(RoundsPane)
        nodes = dict(tree._round_nodes)
        status = app.query_one(StatusBar)
        shown = status.content
        app._refresh_all()  # what every engine event ends with
        await pilot.pause()
        assert tree._round_nodes == nodes, "the round tree was not rebuilt"
        assert status.content is shown, "the status bar was not updated with the same text"


async def test_the_metrics_pane_lays_its_tables_out_once_not_on_every_visit() -> None:
    from cudaforge.tui.widgets.metrics import RenderedOnce

    app = WorkbenchApp(LaunchSpec(open_run=str(RECORDED), use_user_config=False), system_stats=False,
                       cwd=RECORDED.parent)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("4")
        await pilot.pause()
        body = app.query_one("#metrics-body", RenderedOnce)
        assert body.layouts >= 1 and body.virtual_size.height > 20  # the tables are there
        before = body.layouts
        for key in ("2", "4", "3", "4", "down", "up"):
            await pilot.press(key)
        await pilot.pause()
        assert body.layouts == before, "switching back to the pane laid the tables out again"


def test_highlight_queries_are_compiled_once_per_language() -> None:
    from cudaforge.tui.highlight import install
    from textual._tree_sitter import get_language
    from textual.document._syntax_aware_document import SyntaxAwareDocument
    from textual.widgets import TextArea

    assert install()
    query, language = TextArea._get_builtin_highlight_query("python"), get_language("python")
    first = SyntaxAwareDocument("x = 1\n", language).prepare_query(query)
    again = SyntaxAwareDocument("def f():\n    return 2\n", language).prepare_query(query)
    assert first is again
    doc = SyntaxAwareDocument("def f():\n    return 2\n", language)
    assert doc.query_syntax_tree(again), "the shared query still highlights a new document"


CHILD_ENV = "CUDAFORGE_LATENCY_CHILD"  # set: this process is the fresh one the measurement runs in


def test_key_latency_over_rounds_with_approvals() -> None:
    """The measurement below, in a Python process of its own, as the workbench runs: in the suite's process,
    after a thousand other tests, the same presses measured p95 102-135 ms against 76-78 ms alone (a 2-core
    machine, 2026-12-07), its full garbage collections walking what those tests left (598 ms of them
    during the presses against 110 ms)."""
    env = {**os.environ, CHILD_ENV: "1"}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "no:randomly",
                          f"{__file__}::test_key_latency_measured_in_this_process"],
                         capture_output=True, text=True, timeout=600, env=env, cwd=Path(__file__).parent.parent)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("[tui latency") or "p95" in ln]
    print("\n" + "\n".join(lines[-3:]))
    last = (out.stdout.strip().splitlines() or [""])[-1]  # pytest's summary line
    if out.returncode == 0 and " skipped" in last and " passed" not in last:
        pytest.skip(last)
    assert out.returncode == 0, (out.stdout[-3000:] + out.stderr[-2000:])


async def test_key_latency_measured_in_this_process(tmp_path: Path, cache_dir: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """At least 100 keys while three rounds run in review mode, every decision approved with `a` as
    soon as it shows: p95 key-press-to-render <= 100 ms is asserted, the worst is printed. Run by the test
    above in a fresh process."""
    if not os.environ.get(CHILD_ENV):
        pytest.skip("run in a fresh process by test_key_latency_over_rounds_with_approvals")
    from cudaforge.engine.session import RunStore
    from llm_server import ScriptedLLMServer
    from session_kit import CORRECT, KEY, KEY_ENV, coder_reply, judge_optimize_reply
    from tui_kit import task_app, unique, write_config

    os.environ.setdefault(KEY_ENV, KEY)
    script = []
    for i in range(4):
        script += [coder_reply(unique(CORRECT, f"round {i}")), judge_optimize_reply(f"idea {i}")]
    with ScriptedLLMServer(script) as server:
        app = task_app(tmp_path, write_config(tmp_path, cache_dir, server, rounds=3))
        async with app.run_test(size=SIZE) as pilot:
            end = time.monotonic() + 240
            while app._pending() is None and time.monotonic() < end:
                await pilot.pause(0.05)
            app.latency.samples_ms.clear()
            presses = approvals = 0
            while time.monotonic() < end and (app.model.stopped is None or presses < 100):
                if app._pending() is not None:
                    await pilot.press("a")
                    approvals += 1
                else:
                    await pilot.press(PANE_KEYS[presses % len(PANE_KEYS)])
                presses += 1
                await pilot.pause(0.03)
            assert app.model.stopped is not None, "the session did not finish its rounds"
            # The Session ran on its own loop, off the UI's (tui/session_thread.py).
            assert app.session_thread is not None and app.session_thread.loop is not None
            assert app.session_thread.loop is not asyncio.get_running_loop()
        samples = [ms for _, ms in app.latency.samples_ms]
        p95 = sorted(samples)[int(0.95 * (len(samples) - 1))]
        a_worst = max((ms for k, ms in app.latency.samples_ms if k == "a"), default=0.0)
        with capsys.disabled():
            print(f"\n[tui latency, {presses} keys, {approvals} approvals, 3 rounds] {app.latency.summary()}, "
                  f"p95 {p95:.1f} ms, worst on 'a' {a_worst:.1f} ms")
    assert len(samples) == presses >= 100 and approvals >= 5
    rounds = RunStore.open(Path(app.model.run_dir), read_only=True).rounds()
    assert [r.result.outcome for r in rounds if r.result is not None] == ["ok", "ok", "ok"]
    # The target is for the workbench on its own 2-core machine: while other programs keep more runnable
    # work than there are cores (the load average over the test's minute, less this test's own worker),
    # its frames wait for the CPU like everyone else's; then the figure is reported, not asserted.
    load = os.getloadavg()[0] - 1.0
    if load > (os.cpu_count() or 2):
        pytest.skip(f"p95 {p95:.1f} ms not asserted: the machine is overloaded by other processes (load {load:.1f})")
    assert p95 <= 100.0, f"p95 key latency {p95:.1f} ms > 100 ms ({app.latency.summary()})"


async def test_the_source_editor_keeps_its_rendered_lines_when_only_its_focus_changes() -> None:
    """Focus changes only the editor's border: its highlighted lines are not drawn again (the cursor's
    line is); a change of theme draws them all again."""
    app = browse_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("1")
        await pilot.pause()
        editor = app.source_pane.editor
        drawn: list[int] = []
        original = editor._render_line

        def counting(y: int) -> object:
            drawn.append(y)
            return original(y)

        editor._render_line = counting  # type: ignore[method-assign]
        await pilot.press("0")  # the round tree takes the focus from the editor
        await pilot.pause()
        assert app.focused is app.query_one(RoundsPane)
        assert len(drawn) <= 2, f"{len(drawn)} lines drawn again for a focus change"
        drawn.clear()
        await pilot.press("1")
        await pilot.pause()
        assert app.focused is editor and len(drawn) <= 2
        drawn.clear()
        app.theme = "textual-light"
        await pilot.pause()
        assert len(drawn) > 10, "a new theme draws every visible line again"
