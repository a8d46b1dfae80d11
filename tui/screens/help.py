"""Help screen: every action with its key (after [keymap]) and the workflow in a few lines."""

from __future__ import annotations

from cudaforge.tui.keymap import ACTIONS
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

WORKFLOW = """\
Each round: the Judge's recommendation about the round it builds on (approve, edit it, regenerate, or branch
from another round), then the Coder's candidate (approve, edit in place or in $EDITOR, regenerate), then the
engine compiles, verifies, times and (on CUDA) profiles it. Every pane shows the round selected in the tree.
Manual mode: you write each candidate (edit, then approve). Auto mode: no questions; p pauses into review.
Quit leaves a resumable run folder: cudaforge-tui --resume RUN. Browse any run: cudaforge-tui --open RUN.
Remap keys in cudaforge.toml: [keymap] approve = "ctrl+y". Ctrl+P opens the command palette."""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,f1", "app.pop_screen", "Close", id="close_help")]

    def __init__(self, keys: dict[str, str]) -> None:
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        table = Table(title="Key bindings", expand=True, title_justify="left")
        table.add_column("key", style="bold cyan", no_wrap=True)
        table.add_column("action id", style="green", no_wrap=True)
        table.add_column("what it does")
        for action in ACTIONS:
            table.add_row(self.keys.get(action.id, action.key), action.id, action.description)
        table.add_row("ctrl+p", "(palette)", "Command palette: every action by name")
        with VerticalScroll(id="help-body"):
            yield Static(table, id="help-table")
            yield Static(Text(WORKFLOW), id="help-workflow")
            yield Static(Text("Esc closes this screen.", style="dim"))
