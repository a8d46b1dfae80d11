"""The workbench's own default screen: Textual's Screen with a cheaper focus change."""

from __future__ import annotations

from textual.reactive import Reactive
from textual.screen import Screen
from textual.widget import Widget


class WorkbenchScreen(Screen[None]):
    """Every pane key moves the focus to its pane. Textual's `Screen.focused` repaints the whole screen
    when it changes, although the widgets that gained and lost focus refresh themselves and their
    `:focus-within` ancestors are restyled by the screen anyway: the repaint re-rendered every pane,
    the round tree and the bars on each switch (about 10 ms of a 60 ms pane switch on a 2-core machine,
    measured in Pilot, bench/RESULTS.md). Here the focus change repaints only what it changes."""

    focused: Reactive[Widget | None] = Reactive(None, repaint=False)
