"""Load a candidate from a file: a path prompt whose errors are shown in it, never raised."""

from __future__ import annotations

from pathlib import Path

from cudaforge.engine.candidate import load_candidate
from cudaforge.engine.errors import CudaforgeError
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class LoadFileScreen(ModalScreen[str | None]):
    """Returns the candidate's source, or None when cancelled (Esc)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="load_cancel")]

    def __init__(self, cwd: Path) -> None:
        super().__init__()
        self.cwd = cwd

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static("Load a candidate (a .py file defining ModelNew) into the editor. Enter loads, Esc cancels.",
                         id="load-question")
            yield Input(placeholder="path/to/candidate.py", id="load-path")
            yield Static("", id="load-error")

    def on_mount(self) -> None:
        self.query_one("#load-path", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        error = self.query_one("#load-error", Static)
        if not text:
            error.update("type the path of a candidate file")
            return
        path = Path(text).expanduser()
        path = path if path.is_absolute() else self.cwd / path
        try:
            candidate = load_candidate(path)
        except CudaforgeError as exc:
            error.update(exc.message)
            return
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            error.update(f"{path}: cannot read it ({exc})")
            return
        self.dismiss(candidate.source)

    def action_cancel(self) -> None:
        self.dismiss(None)
