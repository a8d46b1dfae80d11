"""Compiler pane: the build log (or the worker's traceback and stderr) with errors and warnings
highlighted, and a cursor that jumps between errors."""

from __future__ import annotations

from cudaforge.engine.results import EvalResult
from cudaforge.tui.format import LogLine, classify_log
from cudaforge.tui.model import RoundView, RunModel
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

_STYLE = {"error": "bold red", "warning": "yellow", "plain": ""}


class CompilerPane(Vertical):
    BORDER_TITLE = "Compiler"

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.lines: list[LogLine] = []
        self.errors: list[int] = []  # indices into lines
        self.current: int | None = None  # index into errors
        self._shown: tuple[int, str | None] | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="compiler-header", classes="pane-header")
        with VerticalScroll(id="compiler-scroll"):
            yield Static("", id="compiler-log")

    def show_round(self, model: RunModel, view: RoundView | None) -> None:
        self.show(view.result if view else None, view.coder_error if view else None)

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
                header.append(f"  {comp.format}  {comp.seconds:.1f} s" + ("  (cached)" if comp.cached else ""),
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
        self.lines = classify_log(body)
        self.errors = [i for i, line in enumerate(self.lines) if line.kind == "error"]
        # the compiler's own "file:line: error:" lines first: they are what a person wants to see
        precise = [i for i in self.errors if ": error" in self.lines[i].text or "error:" in self.lines[i].text]
        if precise:
            self.errors = precise + [i for i in self.errors if i not in precise]
            self.errors.sort()
        self.current = None
        if self.errors:
            header.append(f"  {len(self.errors)} error line(s): n / N to jump", style="red")
        warnings = sum(1 for line in self.lines if line.kind == "warning")
        if warnings:
            header.append(f"  {warnings} warning(s)", style="yellow")
        self.query_one("#compiler-header", Static).update(header)
        self._render_log()
        first = next((i for i, e in enumerate(self.errors) if "error:" in self.lines[e].text), None)
        if first is not None:
            self.current = first
            self._render_log()

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
