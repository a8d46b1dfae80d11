"""Static updates that cost only what changed."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


def set_text(widget: Static, content: Text, *, layout: bool = True) -> bool:
    """`Static.update` repaints and by default lays the whole screen out again: 20-30 ms of the main
    thread on a 2-core machine, 40-80 ms while a round compiles beside it, and the panes are redrawn
    on every engine event and status tick. Skip it when the text is the same; `layout=False` for a
    widget whose size does not follow its text. True if the widget was updated."""
    shown = widget.content
    if isinstance(shown, Text) and shown == content and shown.style == content.style:  # == skips the base style
        return False
    widget.update(content, layout=layout)
    return True
