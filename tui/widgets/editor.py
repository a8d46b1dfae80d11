"""The workbench's text editor: Textual's TextArea with the usual end-of-document keys.

TextArea binds home/end to the line only; ctrl+home / ctrl+end (with shift: selecting) move to the
document's start and end, as every editor does, so text typed after ctrl+end lands at the end.
"""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.widgets import TextArea


class DocumentTextArea(TextArea):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+home", "cursor_document_start", "Start of the document", show=False),
        Binding("ctrl+end", "cursor_document_end", "End of the document", show=False),
        Binding("ctrl+shift+home", "cursor_document_start(True)", "Select to the start", show=False),
        Binding("ctrl+shift+end", "cursor_document_end(True)", "Select to the end", show=False),
    ]

    def action_cursor_document_start(self, select: bool = False) -> None:
        self.move_cursor((0, 0), select=select)

    def action_cursor_document_end(self, select: bool = False) -> None:
        self.move_cursor(self.document.end, select=select)


class KeptDrafts:
    """Text typed into a round's draft, kept while the person looks at other rounds: a pane that shows
    another round loads that round's text, and without this the typed text would be gone. A kept text
    comes back only while the draft it was typed over is still the round's text."""

    def __init__(self) -> None:
        self._kept: dict[int, tuple[str, str]] = {}  # round -> (the text it was typed over, the typed text)

    def leave(self, round: int | None, base: str, text: str) -> None:
        if round is not None and text != base:
            self._kept[round] = (base, text)

    def restore(self, round: int | None, base: str) -> str | None:
        kept = self._kept.get(round) if round is not None else None
        return kept[1] if kept is not None and kept[0] == base else None

    def typed(self, round: int) -> str | None:
        kept = self._kept.get(round)
        return kept[1] if kept is not None else None

    def forget(self, round: int) -> None:
        self._kept.pop(round, None)
