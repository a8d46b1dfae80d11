"""Session log: notices (errors are values, shown here and as toasts) and one line per step."""

from __future__ import annotations

import time

from rich.text import Text
from textual.widgets import RichLog

_LEVEL = {"info": "cyan", "warning": "yellow", "error": "bold red"}


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
