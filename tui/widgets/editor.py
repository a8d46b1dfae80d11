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
