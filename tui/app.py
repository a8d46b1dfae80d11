"""cudaforge-tui: the workbench App. It owns the engine Session as an asyncio task in its own loop
(the engine's heavy work runs in worker processes), turns every Session event into an EngineEvent
message, and answers the Session's decision points through a QueueDriver from the decision bar.

Entry point: `main()` (the `cudaforge-tui` script); argument parsing lives in cli.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import cast

from cudaforge.engine.config import Config, load_config
from cudaforge.engine.errors import CudaforgeError
from cudaforge.engine.flags import flag_overrides
from cudaforge.engine.session import (
    Decision,
    DecisionNeeded,
    Event,
    Notice,
    QueueDriver,
    RoundFinished,
    RoundHeld,
    RoundStarted,
    RulingMade,
    RunStore,
    Session,
    SessionStarted,
    SessionStopped,
    create_session,
    resume_session,
)
from cudaforge.engine.session.review import rule_offline
from cudaforge.engine.session.rulings import RulingKind
from cudaforge.engine.skeleton import manual_skeleton
from cudaforge.tui.browse import open_run, run_gpu_name
from cudaforge.tui.cli import LaunchSpec, parse_args
from cudaforge.tui.collector import HeapFreezer
from cudaforge.tui.commands import WorkbenchCommands
from cudaforge.tui.eventlog import log_entries
from cudaforge.tui.format import failing_source_line
from cudaforge.tui.highlight import install as install_highlight_cache
from cudaforge.tui.keymap import DECISION_ACTIONS, bindings, check_keymap, effective_keys
from cudaforge.tui.latency import LatencyProbe
from cudaforge.tui.messages import DecisionChosen, EngineEvent, RoundSelected, SessionEnded
from cudaforge.tui.model import RoundView, RunModel
from cudaforge.tui.panes import FIRST_PANE, PANE_NAMES, PANES, RoundPane, pane_named
from cudaforge.tui.screens.confirm import ConfirmScreen
from cudaforge.tui.screens.help import HelpScreen
from cudaforge.tui.screens.load_file import LoadFileScreen
from cudaforge.tui.screens.settings import SettingsScreen
from cudaforge.tui.screens.workbench import WorkbenchScreen
from cudaforge.tui.session_thread import SessionThread
from cudaforge.tui.widgets.chart import SpeedupChart
from cudaforge.tui.widgets.compiler import CompilerPane
from cudaforge.tui.widgets.decision import DecisionBar
from cudaforge.tui.widgets.footer import KeyFooter
from cudaforge.tui.widgets.judge import JudgePane
from cudaforge.tui.widgets.log import LogPane
from cudaforge.tui.widgets.review import ReviewPane
from cudaforge.tui.widgets.rounds import RoundsPane
from cudaforge.tui.widgets.source import DIFF_MODES, SourcePane
from cudaforge.tui.widgets.status import StatusBar
from cudaforge.tui.widgets.tabs import PaneTabs
from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

install_highlight_cache()


class WorkbenchApp(App[int]):
    """The workbench. Construct with a LaunchSpec (what the command line asked for)."""

    CSS_PATH = "cudaforge.tcss"
    TITLE = "cudaforge"
    BINDINGS = bindings()
    COMMANDS = App.COMMANDS | {WorkbenchCommands}

    def __init__(self, spec: LaunchSpec, *, env: dict[str, str] | None = None, system_stats: bool = True,
                 cwd: Path | None = None) -> None:
        super().__init__()
        # No animations (Textual animates scrolling and some widgets' state): each animated frame is a
        # redraw, 10-20 ms on a 2-core machine, and the next key waits behind them.
        self.animation_level = "none"
        self.spec = spec
        self.env = env
        self.cwd = cwd or Path.cwd()
        self.system_stats = system_stats
        self.model = RunModel(read_only=spec.open_run is not None)
        self.driver = QueueDriver()
        self.session: Session | None = None
        self.session_task: asyncio.Task[None] | None = None
        self.session_thread: SessionThread | None = None
        self.config: Config | None = None
        self.write_path = Path(spec.config_file) if spec.config_file else self.cwd / "cudaforge.toml"
        self.selected: int | None = None
        self.follow = True  # the selection follows the live round until the person picks an earlier one
        self.keys: dict[str, str] = effective_keys({})
        self.latency = LatencyProbe()
        self.heap = HeapFreezer()  # keeps full garbage collections short (see collector.py)
        self.banner_text = ""
        self.exit_code = 0

    # ---- layout -------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Browsing a run read-only there is no engine to answer: the decision keys leave the footer
        and do nothing (the footer is built once for the whole visit, so this costs no key press)."""
        return not (self.model.read_only and action in DECISION_ACTIONS)

    def get_default_screen(self) -> WorkbenchScreen:
        return WorkbenchScreen(id="_default")

    def compose(self) -> ComposeResult:
        yield Static("", id="banner")
        with Horizontal(id="main"):
            with Vertical(id="left"):
                yield RoundsPane(id="rounds")
                yield SpeedupChart("", id="chart")
            with Vertical(id="panes"):
                yield PaneTabs(FIRST_PANE, self.keys, id="pane-tabs")
                for entry in PANES:
                    yield entry.widget(id=entry.name)
        yield DecisionBar(id="decision")
        yield StatusBar(self.system_stats, id="status")
        yield KeyFooter()

    # typed accessors
    @property
    def source_pane(self) -> SourcePane:
        return self.query_one(SourcePane)

    @property
    def judge_pane(self) -> JudgePane:
        return self.query_one(JudgePane)

    @property
    def log_pane(self) -> LogPane:
        return self.query_one(LogPane)

    # ---- start-up -----------------------------------------------------------------------------
    def on_mount(self) -> None:
        self.query_one(DecisionBar).display = False
        self.query_one("#banner").display = False
        self._display_only(self.query_one(PaneTabs).active)
        self.set_interval(1.0, self._tick)
        self.query_one(RoundsPane).focus()
        self._load_config()
        if self.spec.open_run is not None:
            self._open_run(Path(self.spec.open_run))
        elif self.config is not None or self.spec.resume is not None:
            self.session_task = asyncio.create_task(self._drive())
        self._refresh_all()
        self.heap.freeze()
        if os.environ.get("CUDAFORGE_TUI_STALLS"):
            from cudaforge.tui.latency import StallWatch

            self._stalls = StallWatch()
            self._stalls.start(asyncio.get_running_loop())

    def on_unmount(self) -> None:
        self.heap.stop()
        stalls = getattr(self, "_stalls", None)
        if stalls is not None:
            stalls.stop(os.environ["CUDAFORGE_TUI_STALLS"])

    def _load_config(self) -> None:
        """Configuration errors are shown, not raised: the app opens so the person can read them."""
        try:
            self.config = load_config(self.spec.config_file, flag_overrides(self.spec), cwd=self.cwd,
                                      use_user_config=self.spec.use_user_config)
        except CudaforgeError as exc:
            self._error(exc.message)
            return
        keymap, problems = check_keymap(dict(self.config.section("keymap")))
        for problem in problems:
            self._log(problem, "warning")
        if keymap:
            self.set_keymap(keymap)
        self.keys = effective_keys(keymap)
        tabs = self.query_one(PaneTabs)
        tabs.show(tabs.active, self.keys)

    def _open_run(self, path: Path) -> None:
        """--open: every round of a saved run, read-only; no session, no decisions."""
        opened = open_run(path, self.model)
        if opened.error:
            self._error(opened.error)
            return
        self.selected = self.model.latest()
        self._log(opened.log)
        for text, level in opened.folder_log:
            self._log(text, level)
        self._banner(opened.banner)

    async def _drive(self) -> None:
        """Build the Session (in a thread: task loading imports torch) and run it on its own loop."""
        spec = self.spec
        hook = self._post_event
        try:
            if spec.resume is not None:
                overrides = {"session.rounds": spec.rounds} if spec.rounds else None
                session = await asyncio.to_thread(resume_session, spec.resume, overrides=overrides, driver=self.driver,
                                                  on_event=hook, mode=spec.mode, env=self.env)
            else:
                assert self.config is not None and spec.task is not None
                session = await asyncio.to_thread(create_session, spec.task, self.config, driver=self.driver,
                                                  on_event=hook, mode=spec.mode, env=self.env)
        except CudaforgeError as exc:
            self.post_message(SessionEnded(exc.message, error=True))
            return
        except Exception as exc:  # an engine bug while building: a message, not a traceback
            self.post_message(SessionEnded(f"could not start the session: {exc!r}", error=True))
            return
        self.session = session
        self.heap.freeze()  # the session brought torch and the task's module in
        bar = self.query_one(DecisionBar)
        bar.reserve = True  # its line stays while the session runs: no relayout on every decision
        bar.show(self.model.pending, self.keys, False, manual=self.model.mode == "manual")
        # Its own loop in its own thread: no engine work sits between a key and its frame.
        self.session_thread = SessionThread(session)
        stopped = await self.session_thread.run()
        self.post_message(SessionEnded(stopped.message, error=stopped.reason == "error"))

    def _post_event(self, event: Event) -> None:
        """The Session's on_event hook: only posts; widgets change in the message handler."""
        self.post_message(EngineEvent(event))

    # ---- engine events --------------------------------------------------------------------------
    def on_engine_event(self, message: EngineEvent) -> None:
        event = message.event
        self.heap.after_imports()
        changed = self.model.apply(event)
        if not self.query(RoundsPane):
            return  # a late event from the Session's thread while the app shuts down: nothing to draw
        for entry in log_entries(event, self.model.run_dir):
            self._log(entry.text, entry.level)
        match event:
            case SessionStarted():
                if event.notice:
                    self._banner(event.notice)
                self._load_gpu_name()
            case RoundStarted() if not event.replayed:
                self._follow(event.round)
            case DecisionNeeded():
                self._follow(event.round)
                self._open_tab("source" if event.point == "candidate" else "judge")
            case RoundFinished() if event.replayed:
                self.selected = event.round
            case RoundHeld() if not event.replayed:
                self.notify(f"round {event.round} is held for review (Review pane: "
                            f"{self.keys.get('show_review', '7')})", severity="warning", timeout=6)
            case Notice():
                if event.level != "info":
                    self.notify(event.text, severity="error" if event.level == "error" else "warning", timeout=8)
            case SessionStopped():
                self.query_one(DecisionBar).reserve = False  # nothing more to decide: the panes take the line
                if event.reason == "does_not_fit":  # said once, before any candidate (issue 13)
                    self.notify(event.message, severity="error", timeout=12)
            case _:
                pass
        self._refresh_all(changed)
        if isinstance(event, DecisionNeeded) and self.selected != event.round:
            # the tree stays on the round the person chose; the pane that decides shows what waits
            pane = self.source_pane if event.point == "candidate" else self.judge_pane
            pane.show_round(self.model, self.model.get(event.round))

    def on_session_ended(self, message: SessionEnded) -> None:
        if message.error and self.query("#banner"):
            self._error(message.message)
        self._refresh_all()

    def _load_gpu_name(self) -> None:
        """The device named in the run's manifest (results name the GPU too, once one exists)."""
        if self.model.gpu_name or not self.model.run_dir:
            return
        self.model.gpu_name = run_gpu_name(self.model.run_dir)

    # ---- drawing --------------------------------------------------------------------------------
    def _refresh_all(self, changed: set[int] | None = None) -> None:
        if not self.query(RoundsPane):
            return  # a late event while the app shuts down: the model is updated, nothing to draw
        m = self.model
        if self.selected is None:
            self.selected = m.latest()
        self.query_one(RoundsPane).show_model(m, self.selected)
        self.query_one(SpeedupChart).show(m.speedups(), m.best_round, notes=m.chart_notes())
        self.query_one(StatusBar).show(m)
        self.query_one(DecisionBar).show(m.pending, self.keys,
                                         self._edited(), manual=m.mode == "manual")
        if changed is None or self.selected in changed:
            self._show_round(self.selected)

    def _show_round(self, n: int | None) -> None:
        """Every pane draws itself from the selected round's view."""
        view = self.model.get(n)
        for entry in PANES:
            if entry.follows_round:
                cast(RoundPane, self.query_one(f"#{entry.name}")).show_round(self.model, view)
        if self.source_pane.diff_mode != "off":
            self._apply_diff(self.source_pane.diff_mode)

    def _tick(self) -> None:
        for bar in self.query(StatusBar):  # none while the app shuts down
            bar.show(self.model)
        view = self.model.get(self.selected)
        if view is not None and view.result is None and view.build_started is not None:
            for compiler in self.query(CompilerPane):  # the build's time so far
                compiler.show_round(self.model, view)

    def _log(self, text: str, level: str = "info") -> None:
        for log in self.query(LogPane):  # none while the app shuts down
            log.add(text, level)

    def _banner(self, text: str) -> None:
        self.banner_text = text
        banner = self.query_one("#banner", Static)
        banner.update(Text(text))
        banner.display = bool(text)

    def _error(self, text: str) -> None:
        """Errors are values: a banner, a toast and a log line; never a traceback."""
        self.exit_code = 2
        self._banner("Error: " + text)
        self.query_one("#banner").add_class("error")
        self._log(text, "error")
        self.notify(text, severity="error", timeout=15)

    def _open_tab(self, name: str) -> None:
        tabs = self.query_one(PaneTabs)
        if tabs.active == name:
            return
        self._display_only(name)
        tabs.show(name, self.keys)

    def _display_only(self, name: str) -> None:
        for other in PANE_NAMES:
            self.query_one(f"#{other}").display = other == name

    def _edited(self) -> bool:
        pending = self.model.pending
        if pending is None:
            return False
        pane = self.source_pane if pending.point == "candidate" else self.judge_pane
        return pane.typed_for(pending.round) is not None

    # ---- messages from widgets ------------------------------------------------------------------
    def on_round_selected(self, message: RoundSelected) -> None:
        self.selected = message.round
        self.follow = message.round == self.model.latest()  # a person looking back stays where they are
        self._show_round(message.round)

    def _follow(self, n: int) -> None:
        """A new live round: selected if the person follows the run; else the tree stays where they put it."""
        if self.follow or self.selected is None:
            self.selected = n
        elif self.selected != n:
            self.notify(f"round {n} is live; l selects it", timeout=4)

    def on_decision_chosen(self, message: DecisionChosen) -> None:
        self.run_worker(self.run_action(message.action), exclusive=False)

    def on_text_area_changed(self) -> None:
        if not self.query(DecisionBar):
            return  # a late Changed while the app shuts down
        self.query_one(DecisionBar).show(self.model.pending, self.keys,
                                         self._edited(), manual=self.model.mode == "manual")

    async def on_event(self, event: events.Event) -> None:
        """Time every key from its creation to the refresh after it was handled (the latency probe)."""
        await super().on_event(event)
        if isinstance(event, events.Key):
            self.call_after_refresh(self._key_rendered, event, 10)

    def _key_rendered(self, event: events.Key, rearm: int) -> None:
        """The probe's end point: the first refresh after which no widget has messages queued, so the
        work a key sets off through messages counts too (a cursor move in the round tree selects a
        round, which redraws every pane, after the tree has handled the key itself)."""
        if rearm and self._messages_queued():
            self.call_after_refresh(self._key_rendered, event, rearm - 1)
            return
        self.latency.record(event.key, event.time, event)

    def _messages_queued(self) -> bool:
        return bool(self.message_queue_size) or any(
            node.message_queue_size for node in self.screen.walk_children(with_self=True))

    # ---- decisions ------------------------------------------------------------------------------
    def _pending(self, point: str | None = None) -> DecisionNeeded | None:
        pending = self.model.pending
        if pending is None:
            return None
        if point is not None and pending.point != point:
            return None
        return pending

    def _answer(self, decision: Decision) -> None:
        pending = self._pending()
        if pending is None:
            self.notify("the engine is not waiting for a decision", severity="warning")
            return
        if decision.action not in pending.options:
            self.notify(f"'{decision.action}' is not possible here ({', '.join(pending.options)})",
                        severity="warning")
            return
        self.model.answered()  # no second answer to the same request
        self.source_pane.stop_editing()
        self.judge_pane.stop_editing()
        self.source_pane.kept.forget(pending.round)
        self.judge_pane.kept.forget(pending.round)
        if self.session_thread is not None:
            self.session_thread.call(self.driver.answer, decision)
        else:
            self.driver.answer(decision)
        self._log(f"round {pending.round}: {decision.action} the {pending.point}"
                  + (f" (branch from round {decision.round})" if decision.round is not None else ""))
        self.query_one(DecisionBar).show(None, self.keys, False, False)

    def action_approve(self) -> None:
        pending = self._pending()
        if pending is None:
            self.notify("nothing to approve: the engine is not waiting", severity="warning")
            return
        if pending.point == "candidate":
            pane = self.source_pane
            typed = pane.typed_for(pending.round)
            if typed is not None or (pane.round == pending.round and "approve" not in pending.options):
                text = typed if typed is not None else pane.text
                if not text.strip():
                    self.notify("the candidate is empty: edit one in first (e)", severity="error")
                    return
                self._answer(Decision("edit", text=text))
            else:
                self._answer(Decision("approve"))
        else:
            typed = self.judge_pane.typed_for(pending.round)
            self._answer(Decision("edit", text=typed) if typed is not None else Decision("approve"))

    def action_edit(self) -> None:
        pending = self._pending()
        if pending is None:
            self.notify("nothing to edit now: the engine is not waiting for a decision", severity="warning")
            return
        self.selected = pending.round
        self._show_round(pending.round)
        if pending.point == "candidate":
            self._open_tab("source")
            start = None if self.source_pane.text.strip() else self._manual_start(pending.round)
            self.source_pane.start_editing(start)
        else:
            self._open_tab("judge")
            self.judge_pane.start_editing()
        self.on_text_area_changed()

    def _manual_start(self, round: int) -> str:
        """The module a person starts from: ModelNew with the task's signatures, a stub in the run's format."""
        fmt = str(self.config.get("session", "format") or "") if self.config is not None else ""
        try:
            source = Path(self.model.task_path or self.spec.task or "").read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            source = ""
        return manual_skeleton(source, fmt or ("cpu" if self.spec.device == "cpu" else "inline"), round)

    def action_load_file(self) -> None:
        if self._pending("candidate") is None:
            self.notify("no candidate step is waiting: a file loads into the editor when one is", severity="warning")
            return
        self.push_screen(LoadFileScreen(self.cwd), self._file_loaded)

    def _file_loaded(self, source: str | None) -> None:
        pending = self._pending("candidate")
        if source is None or pending is None:
            return
        self.selected = pending.round
        self._show_round(pending.round)
        self._open_tab("source")
        self.source_pane.start_editing(source)
        self._log(f"round {pending.round}: a candidate loaded from a file into the editor (a approves it)")
        self.on_text_area_changed()

    def _typed_draft(self) -> str:
        """What the person typed into the waiting draft that an answer other than approve would discard."""
        pending = self._pending()
        if pending is None or not self._edited():
            return ""
        return "candidate" if pending.point == "candidate" else "recommendation"

    def _unless_typed(self, what: str, then: Callable[[], None]) -> None:
        """Run `then` at once, or after a yes when it would discard text the person typed."""
        typed = self._typed_draft()
        if not typed:
            then()
            return

        def answered(yes: bool | None) -> None:
            if yes:
                then()

        self.push_screen(ConfirmScreen(f"{what} discards the {typed} you typed. {what} anyway?"), answered)

    def action_write_own(self) -> None:
        if self._pending("recommendation") is None:
            self.notify("the Judge's recommendation is not waiting for a decision", severity="warning")
            return
        self._open_tab("judge")
        self.judge_pane.start_editing("")

    async def action_external_editor(self) -> None:
        """Edit the waiting draft in $VISUAL/$EDITOR: the app suspends and comes back."""
        pending = self._pending()
        if pending is None:
            self.notify("nothing to edit now: the engine is not waiting for a decision", severity="warning")
            return
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
        if not editor:
            self.notify("set $VISUAL or $EDITOR to edit in your editor; e edits in place", severity="error")
            return
        pane = self.source_pane if pending.point == "candidate" else self.judge_pane
        text = pane.text or (self._manual_start(pending.round) if pending.point == "candidate" else "")
        suffix = ".py" if pending.point == "candidate" else ".md"
        with tempfile.NamedTemporaryFile("w", suffix=suffix, prefix=f"cudaforge-r{pending.round}-", delete=False,
                                         encoding="utf-8") as fh:
            fh.write(text)
            path = Path(fh.name)
        try:
            with self.suspend():
                code = subprocess.call([*shlex.split(editor), str(path)])
            new = path.read_text(encoding="utf-8")
        except Exception as exc:  # SuspendNotSupported (headless), a missing editor binary, ...
            self.notify(f"could not run the editor ({editor}): {exc or type(exc).__name__}", severity="error")
            return
        finally:
            path.unlink(missing_ok=True)
        if code != 0:
            self.notify(f"{editor} exited with status {code}; the text is unchanged", severity="warning")
            return
        self._open_tab("source" if pending.point == "candidate" else "judge")
        pane.replace_text(new)
        self._log(f"round {pending.round}: {pending.point} edited in {editor}")
        self.on_text_area_changed()

    def action_regenerate(self) -> None:
        self._unless_typed("Regenerating", lambda: self._answer(Decision("regenerate")))

    def action_branch(self) -> None:
        self._unless_typed("Branching", self._branch)

    def _branch(self) -> None:
        target = self.selected
        if target is None:
            self.notify("select the round to branch from in the tree first", severity="warning")
            return
        if self.model.read_only or self.session is None:
            self.notify("branching needs a live session (this run is read-only)", severity="warning")
            return
        pending = self._pending("recommendation")
        if pending is not None and "branch" in pending.options:
            if target >= pending.round:
                self.notify(f"branch from an earlier round than {pending.round}", severity="warning")
                return
            self._answer(Decision("branch", round=target))
            return
        try:
            self.session.request_branch(target)
        except ValueError as exc:
            self.notify(str(exc), severity="error")
            return
        self._log(f"the next round builds on round {target}")
        self.notify(f"the next round builds on round {target}")

    def action_stop(self) -> None:
        if self._pending() is not None and "stop" in (self.model.pending.options if self.model.pending else ()):
            self._answer(Decision("stop"))
        elif self.session is not None and self.model.stopped is None:
            self.session.request_stop()
            self._log("stop requested: the session stops after the step in flight")
        else:
            self.notify("no running session to stop", severity="warning")

    def action_pause(self) -> None:
        if self.session is None or self.model.mode != "auto":
            self.notify("pause is for auto mode (review mode asks at every decision point)", severity="warning")
            return
        self.session.request_pause()
        self._log("pause requested: review mode from the next decision point")

    def action_leave_editor(self) -> None:
        if self.source_pane.editing:
            self.source_pane.stop_editing()
        if self.judge_pane.editing:
            self.judge_pane.stop_editing()
        self.on_text_area_changed()

    # ---- views ----------------------------------------------------------------------------------
    def action_diff(self) -> None:
        mode = DIFF_MODES[(DIFF_MODES.index(self.source_pane.diff_mode) + 1) % len(DIFF_MODES)]
        self._open_tab("source")
        self._apply_diff(mode)

    def _apply_diff(self, mode: str) -> None:
        view = self.model.get(self.selected)
        other: RoundView | None = None
        if view is not None and mode == "previous":
            other = self.model.get(view.parent)
        elif view is not None and mode == "best":
            other = self.model.get(self.model.best_round)
        if mode != "off" and (other is None or other.candidate is None or view is None):
            self.source_pane.set_diff("off", None, None, "")
            if mode == "previous":
                self.notify("this round has no earlier round to compare with; d again for the best round")
                self.source_pane.diff_mode = "previous"
            return
        label = f"round {other.round}" if other else ""
        self.source_pane.set_diff(mode, other.candidate if other else None, self.source_pane.text, label)

    def _jump(self, step: int) -> None:
        self._open_tab("compiler")
        compiler = self.query_one(CompilerPane)
        line = compiler.jump(step)
        view = self.model.get(self.selected)
        if line is None or view is None or not view.candidate:
            return
        rest = compiler.log_text.split(line, 1)
        where = failing_source_line(line + (rest[1] if len(rest) > 1 else ""), view.candidate)
        if where is not None:
            self.source_pane.highlight_line(where)
            self.notify(f"failing line {where + 1} of the candidate is selected in the Source pane", timeout=3)

    def action_next_error(self) -> None:
        self._jump(+1)

    def action_prev_error(self) -> None:
        self._jump(-1)

    def action_show_rounds(self) -> None:
        self.query_one(RoundsPane).focus()

    def show_pane(self, name: str) -> None:
        """What `show_<name>` does for every pane of the registry (tui/panes.py): show it, focus it."""
        self._open_tab(name)
        with contextlib.suppress(Exception):
            self.query_one(pane_named(name).focus_target).focus()

    def action_show_review(self) -> None:
        self._show_tab("review")

    def action_accept_held(self) -> None:
        self._rule("accept")

    def action_reject_held(self) -> None:
        self._rule("reject")

    def _rule(self, kind: RulingKind) -> None:
        """A ruling on the selected held round: through the live Session on its loop, else straight into
        the run folder (a finished or browsed run); either way the model folds a RulingMade."""
        n, view = self.selected, self.model.get(self.selected)
        if view is None or view.hold_label != "held":
            self.notify(f"round {n} is not held for review" if view is None or not view.hold
                        else f"round {n} is already ruled: {view.hold_label}", severity="warning", timeout=4)
            return
        pane = self.query_one(ReviewPane)
        reason = pane.reason
        pane.clear_reason()
        thread, task = self.session_thread, self.session_task
        if self.session is not None and thread is not None and task is not None and not task.done():
            thread.call(self.session.rule, n, kind, reason)
            return
        try:
            made = rule_offline(self.model.run_dir, n, kind, reason)
        except CudaforgeError as exc:
            self._error(exc.message)
            return
        best = self.model.best_round, self.model.best_speedup
        with contextlib.suppress(OSError, ValueError, CudaforgeError):
            state = RunStore(Path(self.model.run_dir), read_only=True).state
            best = state.best_round, state.best_speedup
        self.post_message(EngineEvent(RulingMade(made, *best)))

    def action_latest(self) -> None:
        self.selected = self.model.latest()
        self._refresh_all()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.keys))

    def action_settings(self) -> None:
        config = self.config or load_config(None, use_user_config=False, cwd=Path(tempfile.gettempdir()))
        self.push_screen(SettingsScreen(config, self.write_path), self._settings_closed)

    def _settings_closed(self, saved: bool | None) -> None:
        if saved:
            self._log(f"settings saved to {self.write_path}; they apply to the next session")
            self.notify(f"saved to {self.write_path}")
            with contextlib.suppress(CudaforgeError):
                self.config = load_config(self.spec.config_file, cwd=self.cwd,
                                          use_user_config=self.spec.use_user_config)

    # ---- quitting -------------------------------------------------------------------------------
    async def action_quit(self) -> None:
        if self.session_task is not None and not self.session_task.done() and self.model.busy:
            step = f"{self.model.phase} in round {self.model.phase_round}"
            question = (f"A round is running ({step}). Quit and discard the step in flight?\n"
                        f"The run folder stays resumable: cudaforge-tui --resume {self.model.run_dir}")
            self.push_screen(ConfirmScreen(question), self._quit_confirmed)
            return
        await self.shutdown()

    async def _quit_confirmed(self, yes: bool | None) -> None:
        if yes:
            await self.shutdown()

    async def shutdown(self) -> None:
        """Cancel the Session (it records 'cancelled' and closes its run folder), then exit."""
        task = self.session_task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, timeout=30)
        self.exit(self.exit_code)


def _show_action(name: str) -> Callable[[WorkbenchApp], None]:
    def action(self: WorkbenchApp) -> None:
        self.show_pane(name)

    action.__name__ = action.__qualname__ = f"action_show_{name}"
    action.__doc__ = f"Show the {name} pane (its key: the action table's show_{name})."
    return action


# One `action_show_<name>` per registry entry: the action ids [keymap] remaps and the strip's clicks name.
for _entry in PANES:
    setattr(WorkbenchApp, f"action_{_entry.action_id}", _show_action(_entry.name))


def main(argv: list[str] | None = None) -> int:
    """`cudaforge-tui`: usage errors exit 2 before the app starts; everything else is shown in the app."""
    spec = parse_args(sys.argv[1:] if argv is None else argv)
    if isinstance(spec, int):
        return spec
    app = WorkbenchApp(spec)
    code = app.run()
    if os.environ.get("CUDAFORGE_TUI_LATENCY"):
        print(app.latency.summary(), file=sys.stderr)
        if os.environ["CUDAFORGE_TUI_LATENCY"].endswith(".json"):  # every sample, for bench/tui_tmux_latency.py
            Path(os.environ["CUDAFORGE_TUI_LATENCY"]).write_text(json.dumps(
                {"samples_ms": [[k, round(ms, 2)] for k, ms in app.latency.samples_ms]}))
    if app.model.run_dir and not app.model.read_only:
        print(f"run folder: {app.model.run_dir}  (resume: cudaforge-tui --resume {app.model.run_dir})",
              file=sys.stderr)
    return code if isinstance(code, int) else app.exit_code


if __name__ == "__main__":
    sys.exit(main())

