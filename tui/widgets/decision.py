"""Decision bar: shown whenever the engine waits; one button per option the engine offers."""

from __future__ import annotations

from cudaforge.engine.session import DecisionNeeded
from cudaforge.tui.messages import DecisionChosen
from cudaforge.tui.widgets.static import set_text
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Button, Static

LABELS = {"approve": "Approve", "edit": "Edit", "regenerate": "Regenerate", "branch": "Branch", "stop": "Stop"}
VARIANTS = {"approve": "success", "stop": "error", "regenerate": "warning"}


class DecisionBar(Horizontal):
    """Shows the model's pending request (it keeps none of its own)."""

    def compose(self) -> ComposeResult:
        yield Static("", id="decision-prompt")
        for action, label in LABELS.items():
            yield Button(label, id=f"decide-{action}", variant=VARIANTS.get(action, "default"),  # type: ignore[arg-type]
                         compact=True)

    def show(self, request: DecisionNeeded | None, keys: dict[str, str], edited: bool, manual: bool) -> None:
        self.display = request is not None
        if request is None:
            return
        what = {"candidate": "the Coder's candidate" if not manual else "your candidate (edit it, then approve)",
                "recommendation": "the Judge's recommendation"}[request.point]
        prompt = Text()
        prompt.append(f"Round {request.round} waits: ", style="bold")
        prompt.append(what)
        if edited:
            prompt.append(" — edited, approve sends your text", style="bold yellow")
        actions = list(dict.fromkeys([*(["approve"] if "edit" in request.options else []), *request.options]))
        prompt.append("   keys: " + "  ".join(f"{keys.get(a, '?')} {a}" for a in actions), style="dim")
        set_text(self.query_one("#decision-prompt", Static), prompt)
        for action in LABELS:
            allowed = action in actions
            self.query_one(f"#decide-{action}", Button).display = allowed

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id and event.button.id.startswith("decide-"):
            self.post_message(DecisionChosen(event.button.id.removeprefix("decide-")))
