"""Source pane: the candidate with Python highlighting (kernels live in its strings), editable in
place, and a diff against the previous (parent) or the best round."""

from __future__ import annotations

from cudaforge.tui.format import failing_source_line, unified_diff
from cudaforge.tui.model import RoundView, RunModel
from cudaforge.tui.widgets.editor import DocumentTextArea, KeptDrafts
from cudaforge.tui.widgets.static import set_text
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static, TextArea

DIFF_MODES = ("off", "previous", "best")


class SourceEditor(DocumentTextArea):
    """Textual's TextArea, except that it keeps its rendered lines where nothing they show changed: a
    Resize that leaves its wrap width as it was, and a style update that leaves its line styles.
    Textual sends Resize to every widget a layout shows again, so each switch to the Source pane
    re-wrapped the document and re-highlighted every visible line although nothing had changed (about
    10 ms a switch on a 2-core machine). Edits and new documents wrap through their own paths."""

    _wrapped_for: tuple[int, int, int] | None = None
    _line_styles: tuple[object, ...] | None = None

    def notify_style_update(self) -> None:
        """TextArea forgets its rendered lines on every style update, and focus is one: moving into or
        out of the editor re-highlighted every visible line although only the border changed. The lines
        are drawn from the TextArea theme, filled in from the app's theme, the widget's own style and
        its component classes' styles; forget them when any of those changes."""
        super(TextArea, self).notify_style_update()  # Widget's: clears the style caches read below
        try:
            line_styles: tuple[object, ...] | None = (
                self.app.theme, self._theme.name if self._theme else None, self.rich_style,
                tuple(self.get_component_rich_style(name, partial=True) for name in sorted(self.COMPONENT_CLASSES)))
        except KeyError:  # the first styling, before the component classes have styles
            line_styles = None
        if line_styles is None or line_styles != self._line_styles:
            self._line_styles = line_styles
            self._line_cache.clear()

    def _on_resize(self, event: events.Resize) -> None:
        wrapped_for = (id(self.wrapped_document), self.wrap_width, self.indent_width)
        if wrapped_for == self._wrapped_for:
            event.prevent_default()  # TextArea's own handler (next in the MRO) would re-wrap
            return
        self._wrapped_for = wrapped_for


class SourcePane(Vertical):
    """Header, editor, and a diff view that replaces the editor while a diff is shown."""

    BORDER_TITLE = "Source"

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.shown_text = ""  # what the pane last loaded (a draft or the approved candidate)
        self.round: int | None = None
        self.editing = False
        self.diff_mode = "off"
        self.kept = KeptDrafts()

    def compose(self) -> ComposeResult:
        yield Static("", id="source-header", classes="pane-header")
        yield SourceEditor("", language="python", read_only=True, show_line_numbers=True, id="source-editor",
                       theme="monokai", soft_wrap=False)
        with VerticalScroll(id="source-diff-scroll"):
            yield Static("", id="source-diff")

    def on_mount(self) -> None:
        self.query_one("#source-diff-scroll").display = False

    @property
    def editor(self) -> TextArea:
        return self.query_one("#source-editor", TextArea)

    @property
    def text(self) -> str:
        return self.editor.text

    @property
    def changed(self) -> bool:
        return self.editor.text != self.shown_text

    def show_round(self, model: RunModel, view: RoundView | None) -> None:
        """The round's candidate under a header naming its kind, format, author and draft state; the
        failing line of a compile error selected."""
        header = Text()
        if view is None:
            header.append("no round selected" if model.rounds else "no rounds yet", style="dim")
            self.show(None, "", header)
            return
        header.append(f"round {view.round} · {view.kind}", style="bold")
        if view.format:
            header.append(f" · {view.format}")
        if view.origin:
            header.append(f" · written by {'the Coder' if view.origin == 'coder' else 'you'}"
                          + (" (edited)" if view.origin == "edited" else ""))
        pending = model.pending
        if pending is not None and pending.round == view.round and pending.point == "candidate":
            header.append("  DRAFT: approve, edit or regenerate", style="bold yellow")
        elif view.candidate_is_draft:
            header.append("  draft", style="yellow")
        if view.coder_error:
            header.append(f"  Coder failed: {view.coder_error}", style="red")
        if view.explanation:
            header.append(f"\n{view.explanation.strip()[:300]}", style="dim")
        self.show(view.round, view.candidate, header)
        result = view.result
        if result is not None and result.outcome == "compile_error" and result.compile and view.candidate:
            line = failing_source_line(result.compile.log, view.candidate)
            if line is not None and not self.editing:
                self.highlight_line(line)

    def show(self, round: int | None, source: str | None, header: Text, *, keep_edits: bool = False) -> None:
        """Load a round's candidate; an edit in progress on the same round is kept."""
        set_text(self.query_one("#source-header", Static), header)
        same = round == self.round and self.shown_text == (source or "")
        if keep_edits and self.editing and round == self.round:
            return
        if same:
            return  # nothing new: keep the cursor, the selection and any edit
        self.kept.leave(self.round, self.shown_text, self.editor.text)
        self.round = round
        self.shown_text = source or ""
        restored = self.kept.restore(round, self.shown_text)
        self.editor.load_text(restored if restored is not None else self.shown_text)
        self.stop_editing()

    def typed_for(self, round: int) -> str | None:
        """What the person typed for `round` (shown now or kept while they look elsewhere); None if nothing."""
        if round == self.round:
            return self.editor.text if self.changed else None
        return self.kept.typed(round)

    def start_editing(self, text: str | None = None) -> None:
        self.set_diff("off", None, None, "")
        if text is not None:
            self.editor.load_text(text)
        self.editing = True
        self.editor.read_only = False
        self.editor.focus()

    def stop_editing(self) -> None:
        self.editing = False
        self.editor.read_only = True

    def replace_text(self, text: str) -> None:
        """Text came back from $EDITOR: it becomes the pending edit."""
        self.editor.load_text(text)

    def highlight_line(self, line: int) -> None:
        """Put the cursor on a 0-based line and select it (the failing line of a compile error)."""
        self.set_diff("off", None, None, "")
        doc_lines = self.editor.document.line_count
        if not 0 <= line < doc_lines:
            return
        width = len(self.editor.document.get_line(line))
        self.editor.selection = ((line, 0), (line, width))  # type: ignore[assignment]
        self.editor.scroll_cursor_visible(center=True)

    def set_diff(self, mode: str, old: str | None, new: str | None, label: str) -> None:
        self.diff_mode = mode
        scroll = self.query_one("#source-diff-scroll")
        if mode == "off" or old is None or new is None:
            scroll.display = False
            self.editor.display = True
            return
        lines = unified_diff(old, new, f"{label}", f"round {self.round}")
        text = Text()
        if not lines:
            text.append(f"no difference from {label}", style="dim")
        for line in lines:
            style = ("green" if line.startswith("+") and not line.startswith("+++") else
                     "red" if line.startswith("-") and not line.startswith("---") else
                     "cyan" if line.startswith("@@") else "bold" if line.startswith(("+++", "---")) else "")
            text.append(line + "\n", style=style)
        self.query_one("#source-diff", Static).update(text)
        self.editor.display = False
        scroll.display = True
