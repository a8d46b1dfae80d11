"""Review pane: the case of a round held for review (engine/hold.py) and the person's ruling on it.

It shows why the round was held, its findings with their evidence, the speed-of-light arithmetic, the
event (and CUPTI, where the result has it) timers, the output comparison and the re-run in a fresh worker
beside the first run: the engine's own text of the case (engine/session/review.py), so `cudaforge rule`
and this pane say the same. A one-line reason goes in the field below; the accept and reject keys
(keymap `accept_held`, `reject_held`) rule on the selected round.
"""

from __future__ import annotations

from cudaforge.engine.session.review import case_lines
from cudaforge.tui.model import RoundView, RunModel
from rich.text import Text
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Input, Static


class ReviewPane(Vertical):
    BORDER_TITLE = "Review"

    DEFAULT_CSS = """
    ReviewPane #review-scroll { height: 1fr; }
    ReviewPane #review-reason { height: 3; }
    """

    _shown: tuple[int, ...] | None = None

    def compose(self):  # type: ignore[no-untyped-def]
        with VerticalScroll(id="review-scroll"):
            yield Static("", id="review-body")
        yield Input(placeholder="reason for the ruling (one line, optional); then the accept or reject key",
                    id="review-reason")

    @property
    def reason(self) -> str:
        return self.query_one("#review-reason", Input).value.strip()

    def clear_reason(self) -> None:
        self.query_one("#review-reason", Input).value = ""

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter keeps the reason and gives the keys back to the pane (the ruling is a key, not Enter)."""
        event.stop()
        self.query_one("#review-scroll").focus()

    def show_round(self, model: RunModel, view: RoundView | None) -> None:
        key = (id(view), id(view.result), id(view.rerun), id(view.ruling), id(view.profile), len(view.hold)) \
            if view is not None else ()
        if key == self._shown:
            return
        self._shown = key
        self.query_one("#review-body", Static).update(render_review(model, view))


def render_review(model: RunModel, view: RoundView | None) -> Text:
    held = model.held()
    text = Text()
    text.append(f"held for review: {', '.join(f'r{n}' for n in held)}\n\n" if held else
                "no round is held for review\n\n", style="bold yellow" if held else "dim")
    if view is None:
        return text
    text.append(f"round {view.round}\n", style="bold")
    if view.result is None:
        text.append("not evaluated yet", style="dim")
        return text
    lines = case_lines(None, result=view.result, hold=view.hold, rerun=view.rerun, ruling=view.ruling,
                       profile=view.profile)
    for line in lines:
        style = "bold yellow" if line.startswith("HELD") else "bold green" if line.startswith("RULED: accept") else \
            "bold red" if line.startswith("RULED: reject") else "bold" if line.endswith(":") and not \
            line.startswith(" ") else ""
        text.append(line + "\n", style=style)
    return text
