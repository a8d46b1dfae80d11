"""Compiler pane: the build log (or the worker's traceback and stderr) with errors and warnings
highlighted, and a cursor that jumps between the compiler's diagnostics. While a round's build runs it
shows ninja's steps as they come and the time so far."""

from __future__ import annotations

import time

from cudaforge.engine.results import EvalResult
from cudaforge.tui.format import LogLine, classify_log, diagnostic_lines, fmt_elapsed
from cudaforge.tui.model import RoundView, RunModel
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

_STYLE = {"error": "bold red", "warning": "yellow", "plain": ""}


def build_seconds(result: EvalResult) -> float:
    """The build's own time: a failed build records none in its compile result (it raised before the
    clock stopped), but the worker's build phase timed it."""
    comp = result.compile
    recorded = comp.seconds if comp is not None else 0.0
    return recorded if recorded > 0 else result.phases.get("build", 0.0) + result.phases.get("init", 0.0)


class CompilerPane(Vertical):
    BORDER_TITLE = "Compiler"

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.lines: list[LogLine] = []
        self.errors: list[int] = []  # indices into lines
        self.current: int | None = None  # index into errors
        self._shown: tuple[object, ...] | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="compiler-header", classes="pane-header")
        with VerticalScroll(id="compiler-scroll"):
            yield Static("", id="compiler-log")

    def show_round(self, model: RunModel, view: RoundView | None) -> None:
        if view is not None and view.result is None and view.build_started is not None:
            self.show_build(model, view)
            return
        self.show(view.result if view else None, view.coder_error if view else None)

    def show_build(self, model: RunModel, view: RoundView) -> None:
        """The build in progress (or done, the rest of the evaluation running): its lines so far and
        the time since it began. Redrawn each second by the App while the round is evaluated."""
        live = model.phase_round == view.round and model.phase in ("compiling", "verifying", "timing")
        building = live and model.phase_detail in ("build", "init")
        seconds = int(time.time() - view.build_started) if building and view.build_started else -1
        key = ("build", view.round, len(view.build_lines), seconds, model.phase_detail if live else "")
        if key == self._shown:
            return
        self._shown = key
        header = Text()
        if building:
            header.append("building", style="bold cyan")
            header.append(f"  {view.format or ''}  {fmt_elapsed(seconds)} so far", style="dim")
        elif live:
            header.append("build done", style="bold green")
            header.append(f"  evaluating ({model.phase_detail})", style="dim")
        else:
            header.append("build log so far", style="dim")
        body = "\n".join(view.build_lines) if view.build_lines else \
            "(ninja prints each step as it finishes; nvcc prints nothing until an object is built)"
        self._set(header, body, keep_last=True)

    def show(self, result: EvalResult | None, coder_error: str | None = None) -> None:
        key = (id(result), coder_error)
        if key == self._shown:
            return  # same result: keep the error cursor where the person put it
        self._shown = key
        header = Text()
        body = ""
        if result is None:
            header.append(coder_error and "no candidate: " + coder_error or "not evaluated yet", style="dim")
        else:
            comp = result.compile
            if comp is not None:
                if comp.ok:
                    header.append("build ok", style="bold green")
                else:
                    header.append("build failed", style="bold red")
                header.append(f"  {comp.format}  {build_seconds(result):.1f} s" + ("  (cached)" if comp.cached else ""),
                              style="dim")
                body = comp.log
            else:
                header.append(result.outcome, style="bold red" if not result.accepted else "green")
            extra = [part for part in (result.traceback, result.stderr_tail if not result.accepted else "")
                     if part and part not in body]
            if extra:
                body = (body + "\n" if body else "") + "\n".join(extra)
            if not body.strip():
                body = "(the build printed nothing)" if comp is not None and comp.ok else result.message
        self._set(header, body)
        if self.errors:
            self.current = 0  # the first diagnostic is what a person wants to see
            self._render_log()

    def _set(self, header: Text, body: str, *, keep_last: bool = False) -> None:
        self.lines = classify_log(body)
        self.errors = diagnostic_lines(self.lines)
        self.current = None
        if self.errors:
            count = len(self.errors)
            header.append(f"  {count} error{'s' if count != 1 else ''}: n / N to step through", style="red")
        warnings = sum(1 for line in self.lines if line.kind == "warning")
        if warnings:
            header.append(f"  {warnings} warning(s)", style="yellow")
        self.query_one("#compiler-header", Static).update(header)
        self._render_log()
        if keep_last:  # a streaming log: its newest line in view, once the new lines are laid out
            scroll = self.query_one("#compiler-scroll", VerticalScroll)
            self.call_after_refresh(scroll.scroll_end, animate=False)

    def _render_log(self) -> None:
        text = Text()
        marked = self.errors[self.current] if self.current is not None and self.errors else None
        for i, line in enumerate(self.lines):
            style = _STYLE[line.kind]
            if i == marked:
                style = "bold white on red"
                text.append("▶ ", style="bold red")
            text.append(line.text + "\n", style=style)
        self.query_one("#compiler-log", Static).update(text)

    def jump(self, step: int) -> str | None:
        """Move to the next (+1) or previous (-1) error; returns that log line."""
        if not self.errors:
            return None
        if self.current is None:
            self.current = 0 if step > 0 else len(self.errors) - 1
        else:
            self.current = (self.current + step) % len(self.errors)
        self._render_log()
        line_index = self.errors[self.current]
        self.query_one("#compiler-scroll", VerticalScroll).scroll_to(y=max(0, line_index - 3), animate=False)
        return self.lines[line_index].text

    @property
    def log_text(self) -> str:
        return "\n".join(line.text for line in self.lines)
