"""The pane registry and the two helpers split out of the App: every place a pane appears follows from
one registry entry; --open reads a real run folder; the session log's text per event."""

from __future__ import annotations

from pathlib import Path

from cudaforge.engine.session import Notice, SessionStopped
from cudaforge.tui.app import WorkbenchApp
from cudaforge.tui.browse import open_run, run_gpu_name
from cudaforge.tui.eventlog import LogEntry, log_entries
from cudaforge.tui.keymap import ACTIONS, effective_keys
from cudaforge.tui.model import RunModel
from cudaforge.tui.panes import PANE_NAMES, PANES
from cudaforge.tui.widgets.tabs import PANES as STRIP

FIXTURE_RUN = Path(__file__).parent / "fixtures" / "tui_run" / "run"


def test_every_registry_entry_is_in_the_strip_the_action_table_and_the_app() -> None:
    assert list(STRIP) == list(PANE_NAMES) and [STRIP[p.name] for p in PANES] == [p.title for p in PANES]
    by_id = {a.id: a for a in ACTIONS}
    for entry in PANES:
        action = by_id[entry.action_id]
        assert action.key == entry.key and action.description == entry.description
        assert callable(getattr(WorkbenchApp, f"action_{entry.action_id}", None))
    assert [p.key for p in PANES] == ["1", "2", "3", "4", "5", "6", "7"]  # the keys people know
    assert effective_keys({"show_log": "f6"})["show_log"] == "f6"


def test_open_run_fills_the_model_from_a_saved_run_folder() -> None:
    model = RunModel(read_only=True)
    opened = open_run(FIXTURE_RUN, model)
    assert opened.error == ""
    assert sorted(model.rounds) and model.run_dir == str(FIXTURE_RUN)
    assert opened.log.startswith(f"opened {FIXTURE_RUN} read-only: {len(model.rounds)} round(s), status ")
    assert "read-only" in opened.banner and model.gpu_name == run_gpu_name(str(FIXTURE_RUN)) != ""


def test_open_run_of_a_missing_folder_is_an_error_message(tmp_path: Path) -> None:
    model = RunModel(read_only=True)
    opened = open_run(tmp_path / "no-such-run", model)
    assert opened.error and not model.rounds and opened.log == ""
    assert run_gpu_name(str(tmp_path / "no-such-run")) == ""


def test_log_entries_say_what_the_session_log_shows() -> None:
    assert log_entries(Notice("warning", "GPU busy"), "") == (LogEntry("GPU busy", "warning"),)
    stopped = SessionStopped("max_rounds", "3 rounds done", 2, 1.5, 3)
    assert log_entries(stopped, "/runs/r1") == (
        LogEntry("session stopped (max_rounds): 3 rounds done", "info"),
        LogEntry("resume with: cudaforge-tui --resume /runs/r1"))
    broken = SessionStopped("error", "boom", None, None, 1, resumable=False)
    assert log_entries(broken, "/runs/r1") == (LogEntry("session stopped (error): boom", "warning"),)


async def test_a_remapped_pane_key_opens_its_pane_and_the_old_key_no_longer_does(tmp_path: Path) -> None:
    """[keymap] remaps the registry's generated `show_<name>` actions like any other (browsing a run)."""
    from cudaforge.tui.cli import LaunchSpec
    from cudaforge.tui.widgets.tabs import PaneTabs

    cfg = tmp_path / "cudaforge.toml"
    cfg.write_text('[keymap]\nshow_log = "f6"\nshow_metrics = "m"\n', encoding="utf-8")
    app = WorkbenchApp(LaunchSpec(open_run=str(FIXTURE_RUN), config_file=str(cfg), use_user_config=False),
                       system_stats=False, cwd=tmp_path)
    async with app.run_test(size=(150, 44)) as pilot:
        await pilot.pause()
        strip = app.query_one(PaneTabs)
        assert "f6 Log" in str(strip.content) and "m NCU" in str(strip.content)
        await pilot.press("6")  # the default key of show_log, remapped away
        await pilot.pause()
        assert strip.active == "source"
        await pilot.press("f6")
        await pilot.pause()
        assert strip.active == "log" and app.query_one("#log").display and not app.query_one("#source").display
        await pilot.press("m")
        await pilot.pause()
        assert strip.active == "metrics" and app.focused is app.query_one("#metrics")
        await pilot.press("1")  # an untouched pane key still works, and focuses its editor
        await pilot.pause()
        assert strip.active == "source" and app.focused is app.query_one("#source-editor")
