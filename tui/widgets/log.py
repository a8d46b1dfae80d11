"""Session log: notices (errors are values, shown here and as toasts) and one line per step."""

from __future__ import annotations

import time
from pathlib import Path

from cudaforge.engine.session import RoundRecord
from cudaforge.engine.session.records import State
from cudaforge.tui.format import fmt_speedup
from rich.text import Text
from textual.widgets import RichLog

_LEVEL = {"info": "cyan", "warning": "yellow", "error": "bold red"}
SESSION_LOG = "session.log"  # the session's own log in its run folder (written by the engine)


def run_folder_log(path: Path, records: list[RoundRecord], state: State) -> list[tuple[str, str]]:
    """What the Log pane shows of a browsed run: the session's own log kept in the run folder; where the
    run has none (older runs), what the folder records: each round's outcome and how the session ended."""
    try:
        kept = (path / SESSION_LOG).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        kept = []
    if kept:
        return [(f"{SESSION_LOG}: {line}", "info") for line in kept if line.strip()]
    lines: list[tuple[str, str]] = [(f"{path} keeps no {SESSION_LOG}; from its rounds and state:", "info")]
    for rec in records:
        result = rec.result
        if result is not None:
            text = f"round {rec.round} ({rec.kind}): {result.outcome}" + (
                f", {fmt_speedup(result.speedup)}" if result.accepted else f" — {result.message}")
            lines.append((text, "info" if result.accepted else "warning"))
        elif rec.finished:
            lines.append((f"round {rec.round} ({rec.kind}): no candidate"
                          + (f" — {rec.coder_error}" if rec.coder_error else ""), "warning"))
        else:
            lines.append((f"round {rec.round} ({rec.kind}): not finished", "warning"))
    if state.stop_reason:
        lines.append((f"session {state.status or '?'} ({state.stop_reason}): {state.stop_message or ''}", "info"))
    if (path / "error.log").exists():
        lines.append((f"the session recorded an error: {path / 'error.log'}", "error"))
    return lines


class LogPane(RichLog):
    BORDER_TITLE = "Log"

    def __init__(self, **kwargs: object) -> None:
        super().__init__(wrap=True, markup=False, highlight=False, max_lines=2000, **kwargs)  # type: ignore[arg-type]
        self.entries: list[str] = []  # plain text of every line, for tests and copying

    def add(self, text: str, level: str = "info", stamp: bool = True) -> None:
        line = Text()
        if stamp:
            line.append(time.strftime("%H:%M:%S "), style="dim")
        line.append(text, style=_LEVEL.get(level, ""))
        self.entries.append(text)
        self.write(line)
