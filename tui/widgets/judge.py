"""Judge pane: the recommendation as markdown; editable before it goes to the Coder, or your own."""

from __future__ import annotations

import re

from cudaforge.tui.format import judge_mode_label
from cudaforge.tui.model import RoundView, RunModel
from cudaforge.tui.widgets.editor import DocumentTextArea, KeptDrafts
from cudaforge.tui.widgets.static import set_text
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Markdown, Static, TextArea


class JudgePane(Vertical):
    BORDER_TITLE = "Judge"

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.shown_text = ""
        self.round: int | None = None
        self.editing = False
        self._rendered: str | None = None
        self._loaded = False  # show() has loaded a round (or none) at least once
        self.kept = KeptDrafts()

    def compose(self) -> ComposeResult:
        yield Static("", id="judge-header", classes="pane-header")
        yield Markdown("", id="judge-markdown")
        yield DocumentTextArea("", language="markdown", id="judge-editor", soft_wrap=True)

    def on_mount(self) -> None:
        self.editor.display = False

    @property
    def editor(self) -> TextArea:
        return self.query_one("#judge-editor", TextArea)

    @property
    def text(self) -> str:
        return self.editor.text if self.editing or self.changed else self.shown_text

    @property
    def changed(self) -> bool:
        return self.editor.text != self.shown_text

    def show_round(self, model: RunModel, view: RoundView | None) -> None:
        """The recommendation this round builds on, under a header naming its subject, mode and source."""
        if view is None:
            self.show(None, "", Text("no round selected", style="dim"))
            return
        header = Text()
        if view.recommendation is None:
            header.append(f"round {view.round}: no recommendation" + (" (seed rounds start without one)"
                                                                      if view.parent is None else ""), style="dim")
        else:
            header.append(f"round {view.round} · Judge on round {view.subject_round} · {judge_mode_label(view.judge_mode)} · "
                          f"{view.judge_source}", style="bold")
        pending = model.pending
        if pending is not None and pending.round == view.round and pending.point == "recommendation":
            header.append("  DRAFT: approve, edit (e), write your own (w), regenerate or branch", style="bold yellow")
        self.show(view.round, view.recommendation, header)

    def show(self, round: int | None, text: str | None, header: Text) -> None:
        set_text(self.query_one("#judge-header", Static), header)
        if self._loaded and round == self.round and (text or "") == self.shown_text:
            # an edit in progress is kept; otherwise nothing is new (the panes are redrawn on every
            # engine event) and reloading the editor would cost a layout of the screen
            return
        if self._loaded:
            self.kept.leave(self.round, self.shown_text, self.editor.text)
        self._loaded = True
        self.round = round
        self.shown_text = text or ""
        restored = self.kept.restore(round, self.shown_text)
        self.editor.load_text(restored if restored is not None else self.shown_text)
        self.stop_editing()

    def typed_for(self, round: int) -> str | None:
        """What the person typed for `round` (shown now or kept while they look elsewhere); None if nothing."""
        if round == self.round:
            return self.editor.text if self.changed else None
        return self.kept.typed(round)

    def start_editing(self, text: str | None = None) -> None:
        if text is not None:
            self.editor.load_text(text)
        self.editing = True
        self.query_one("#judge-markdown").display = False
        self.editor.display = True
        self.editor.focus()

    def stop_editing(self) -> None:
        """Back to the rendered view; a changed text stays as the pending edit and is shown rendered."""
        self.editing = False
        self.editor.display = False
        self.query_one("#judge-markdown").display = True
        self._render_markdown(self.editor.text)

    def _render_markdown(self, text: str) -> None:
        """Markdown.update is costly (it rebuilds child widgets): only when the text changed."""
        if text != self._rendered:
            self._rendered = text
            self.query_one("#judge-markdown", Markdown).update(_as_markdown(text) or "*no recommendation*")

    def replace_text(self, text: str) -> None:
        self.editor.load_text(text)
        self._render_markdown(text)


_FIELD = re.compile(r"^([A-Z][A-Za-z ]{1,30}):\s*(.*)$")


def _as_markdown(text: str) -> str:
    """The Judge's "Field: value" lines become a bold-keyed list so the structure shows; prose passes."""
    out = []
    for line in text.splitlines():
        m = _FIELD.match(line)
        out.append(f"- **{m.group(1)}**: {m.group(2)}" if m else line)
    return "\n".join(out)
