"""Textual messages: the only way engine events and pane selections reach widgets."""

from __future__ import annotations

from cudaforge.engine.session import Event
from textual.message import Message


class EngineEvent(Message):
    """One Session event, posted from the Session's on_event hook and handled in the App's loop."""

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event


class RoundSelected(Message):
    """The person picked a round in the tree (or the chart): every pane shows it."""

    def __init__(self, round: int) -> None:
        super().__init__()
        self.round = round


class DecisionChosen(Message):
    """A decision-bar button was pressed; the App turns it into an action."""

    def __init__(self, action: str) -> None:
        super().__init__()
        self.action = action


class SessionEnded(Message):
    """The Session's task finished (normally, by stop, or with an error shown as a value)."""

    def __init__(self, message: str, error: bool = False) -> None:
        super().__init__()
        self.message = message
        self.error = error
