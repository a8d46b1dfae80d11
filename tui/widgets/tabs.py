"""The pane tab strip: one line naming every pane with its key, the shown one highlighted; a click on
a name shows that pane.

One Static instead of Textual's TabbedContent: that widget puts a ContentSwitcher, a TabPane per pane,
a Tabs bar of six tabs and an animated underline between the panes and the screen, and every layer is
drawn again on each refresh. A pane switch is the key people press most; with this strip it redraws
the strip and the pane, nothing else (bench/RESULTS.md has the before and after)."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

# pane name -> its title; the App action `show_<name>` opens it
PANES: dict[str, str] = {"source": "Source", "compiler": "Compiler", "correctness": "Correctness",
                         "metrics": "NCU", "judge": "Judge", "log": "Log", "review": "Review"}


class PaneTabs(Static):
    """Shows which pane is open; knows nothing of the panes themselves."""

    def __init__(self, active: str, keys: dict[str, str], **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self.active = active
        self.keys = keys
        self._shown: tuple[str, tuple[str, ...]] | None = None

    def on_mount(self) -> None:
        self.show(self.active, self.keys)

    def show(self, active: str, keys: dict[str, str]) -> None:
        """Highlight `active`; `keys` (action id -> key) labels each pane with the key that opens it."""
        self.active, self.keys = active, keys
        labels = tuple(keys.get(f"show_{name}", "").split(",")[0] for name in PANES)
        if self._shown == (active, labels):
            return
        self._shown = (active, labels)
        parts: list[Content] = []
        for (name, title), key in zip(PANES.items(), labels, strict=True):
            label = f" {key} {title} " if key else f" {title} "
            style = "reverse bold $accent" if name == active else "$text-muted"
            parts.append(Content.from_markup(f"[{style} @click=app.show_{name}]$label[/]", label=label))
        self.update(Content(" ").join(parts), layout=False)
