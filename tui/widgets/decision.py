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
    """Shows the model's pending request (it keeps none of its own).

    While a session runs the bar keeps its line between decisions (`reserve`): a bar that appeared and
    vanished with every decision resized the panes above it, and the whole screen was laid out and
    drawn again on every approval (40-60 ms on a 2-core machine). Browsing a finished run, it is hidden."""

    reserve = False

    def compose(self) -> ComposeResult:
        yield Static("", id="decision-prompt")
        for action, label in LABELS.items():
            yield Button(label, id=f"decide-{action}", variant=VARIANTS.get(action, "default"),  # type: ignore[arg-type]
                         compact=True)

    def show(self, request: DecisionNeeded | None, keys: dict[str, str], edited: bool, manual: bool) -> None:
        self.display = request is not None or self.reserve
        self.set_class(request is None, "idle")
        if request is None:
            if self.reserve:
                set_text(self.query_one("#decision-prompt", Static), Text("no decision waiting", style="dim"))
                for button in self.query(Button):
                    button.display = False
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
