"""Rounds pane: the round tree (children nest under the round they build on) with status, speedup, % of
speed of light, held for review (and the ruling), cost."""

from __future__ import annotations

from cudaforge.tui.format import fmt_speedup, status_glyph
from cudaforge.tui.messages import RoundSelected
from cudaforge.tui.model import RoundView, RunModel
from rich.text import Text
from textual.widgets import Tree
from textual.widgets.tree import TreeNode


class RoundsPane(Tree[int]):
    """A tree of rounds; highlighting a node selects that round in every pane."""

    BORDER_TITLE = "Rounds"

    def __init__(self, **kwargs: object) -> None:
        super().__init__("run", **kwargs)  # type: ignore[arg-type]
        self.show_root = False
        self.guide_depth = 2
        self.auto_expand = False  # Enter opens a round; it never folds a branch away
        self._round_nodes: dict[int, TreeNode[int]] = {}
        self._round_shown: int | None = None
        self._structure: tuple[tuple[int, int | None], ...] | None = None  # (round, parent) of what is shown

    def label_for(self, view: RoundView, model: RunModel) -> Text:
        glyph, style = status_glyph(view.status)
        text = Text()
        text.append(f"r{view.round} ", style="bold")
        text.append(f"{view.kind:<8} ", style="dim" if view.kind != "manual" else "cyan")
        text.append(glyph + " ", style=style)
        text.append(fmt_speedup(view.speedup), style="bold green" if view.round == model.best_round else "")
        if view.sol_fraction is not None:
            text.append(f" {view.sol_fraction:.0%} SOL", style="dim")
        if view.hold_label:
            text.append(f" {view.hold_label}", style={"held": "bold yellow", "accepted": "green"}.get(view.hold_label,
                                                                                                   "red"))
        if view.cost_usd:
            text.append(f" ${view.cost_usd:.3f}", style="dim")
        if view.round == model.best_round:
            text.append(" ★", style="yellow")
        return text

    def show_model(self, model: RunModel, selected: int | None) -> None:
        """Show the model, keeping the selection. Called on every engine event and most of them
        change no round's line: rebuilding the tree asks for a layout of the whole screen (tens of
        ms on 2 cores), so the tree is rebuilt only when rounds were added or re-parented and
        otherwise only changed labels are repainted."""
        structure = tuple((n, model.rounds[n].parent) for n in sorted(model.rounds))
        if structure == self._structure:
            for n, node in self._round_nodes.items():
                label = self.label_for(model.rounds[n], model)
                if label != node.label:
                    node.set_label(label)
            node = self._round_nodes.get(selected) if selected is not None else None
            if node is not None and self.cursor_node is not node:
                self._round_shown = selected
                self.call_after_refresh(self._move_to, selected)
            return
        self._structure = structure
        with self.prevent(Tree.NodeHighlighted, Tree.NodeSelected):
            self.clear()
            self._round_nodes = {}
            for n in sorted(model.rounds):
                view = model.rounds[n]
                parent = self._round_nodes.get(view.parent) if view.parent is not None else None
                anchor = parent if parent is not None else self.root
                node = anchor.add(self.label_for(view, model), data=n, expand=True)
                node.allow_expand = False
                self._round_nodes[n] = node
                if parent is not None:
                    parent.allow_expand = True
                    parent.expand()
            self.root.expand()
            self._round_shown = selected
        if selected in self._round_nodes:
            # node lines exist only after the tree re-renders; the guard above drops the echo
            self.call_after_refresh(self._move_to, selected)

    def _move_to(self, n: int) -> None:
        node = self._round_nodes.get(n)
        if node is not None and n == self._round_shown:
            self.move_cursor(node)

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted[int]) -> None:
        event.stop()
        if event.node.data is not None and event.node.data != self._round_shown:
            self._round_shown = event.node.data
            self.post_message(RoundSelected(event.node.data))

    def on_tree_node_selected(self, event: Tree.NodeSelected[int]) -> None:
        event.stop()
        if event.node.data is not None:
            self._round_shown = event.node.data
            self.post_message(RoundSelected(event.node.data))
