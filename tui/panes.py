"""The pane registry: every pane of the workbench, once.

The pane strip (`widgets/tabs.py`), the App's layout, its show action and the action table's
`show_<name>` entries (`keymap.py`, remappable in [keymap]) are all derived from `PANES`, so a new pane
is one entry here and one widget in `tui/widgets/` (see docs/ARCHITECTURE.md, "Where a change goes").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from cudaforge.tui.model import RoundView, RunModel
from cudaforge.tui.widgets.compiler import CompilerPane
from cudaforge.tui.widgets.correctness import CorrectnessPane
from cudaforge.tui.widgets.judge import JudgePane
from cudaforge.tui.widgets.log import LogPane
from cudaforge.tui.widgets.metrics import MetricsPane
from cudaforge.tui.widgets.review import ReviewPane
from cudaforge.tui.widgets.source import SourcePane
from textual.widget import Widget


class RoundPane(Protocol):
    """A pane that draws the selected round (builds its own header from the RoundView)."""

    def show_round(self, model: RunModel, view: RoundView | None) -> None: ...


@dataclass(frozen=True)
class Pane:
    name: str  # the widget id and the action id `show_<name>` (what [keymap] remaps)
    title: str  # its name in the pane strip
    widget: Callable[..., Widget]  # built as widget(id=name)
    key: str  # default key of `show_<name>`
    description: str  # for the help screen and the command palette
    focus: str = ""  # selector of what takes focus when the pane is shown ("" = the pane itself)
    follows_round: bool = True  # has show_round(model, view): redrawn when the selected round changes

    @property
    def action_id(self) -> str:
        return f"show_{self.name}"

    @property
    def focus_target(self) -> str:
        return self.focus or f"#{self.name}"


PANES: tuple[Pane, ...] = (
    Pane("source", "Source", SourcePane, "1", "Show the Source pane", focus="#source-editor"),
    Pane("compiler", "Compiler", CompilerPane, "2", "Show the Compiler pane", focus="#compiler-scroll"),
    Pane("correctness", "Correctness", CorrectnessPane, "3", "Show the Correctness pane"),
    Pane("metrics", "NCU", MetricsPane, "4", "Show the NCU metrics pane"),
    Pane("judge", "Judge", JudgePane, "5", "Show the Judge pane"),
    Pane("log", "Log", LogPane, "6", "Show the session log", follows_round=False),
    Pane("review", "Review", ReviewPane, "7", "Show the Review pane (rounds held for review)", focus="#review-scroll"),
)
PANE_NAMES: tuple[str, ...] = tuple(p.name for p in PANES)
FIRST_PANE = PANES[0].name  # shown when the workbench opens


def pane_named(name: str) -> Pane:
    """The registry entry of `name` (KeyError for a name that is no pane)."""
    return {p.name: p for p in PANES}[name]
