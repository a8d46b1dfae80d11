"""Every action of the workbench with its id, default key and description, in one table.

The ids are what users remap in cudaforge.toml's [keymap] (action id -> key), what the command
palette lists and what the help screen shows; the App's bindings are generated from this table so
the three can never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cudaforge.tui.panes import PANES
from textual.binding import Binding


@dataclass(frozen=True)
class Action:
    id: str  # the binding id (remappable) and the App action name
    key: str  # default key(s), comma-separated
    description: str
    group: str
    show: bool = True  # in the footer
    priority: bool = False  # fires even while an editor has focus


ACTIONS: tuple[Action, ...] = (
    Action("approve", "a", "Approve (sends your edit if you changed the text)", "decide"),
    Action("edit", "e", "Edit the draft in place (Esc leaves the editor)", "decide"),
    Action("external_editor", "o", "Edit the draft in $VISUAL / $EDITOR", "decide", show=False),
    Action("regenerate", "r", "Regenerate the Coder's or Judge's draft", "decide"),
    Action("branch", "b", "Branch: the next round builds on the selected round", "decide"),
    Action("load_file", "i", "Load a candidate from a file into the editor", "decide", show=False),
    Action("write_own", "w", "Write your own recommendation for the Coder", "decide", show=False),
    Action("stop", "s", "Stop the session (the run folder stays resumable)", "decide"),
    Action("pause", "p", "Auto mode: pause (review from the next decision point)", "decide", show=False),
    Action("diff", "d", "Source: cycle diff against the previous round / the best round / off", "view"),
    Action("next_error", "n", "Compiler: jump to the next error", "view", show=False),
    Action("prev_error", "N", "Compiler: jump to the previous error", "view", show=False),
    Action("show_rounds", "0", "Focus the round tree", "view", show=False),
    *(Action(p.action_id, p.key, p.description, "view", show=False) for p in PANES),  # the registry's (tui/panes.py)
    Action("accept_held", "y", "Review: accept the selected held round (the reason field is kept)", "review",
           show=False),
    Action("reject_held", "x", "Review: reject the selected held round", "review", show=False),
    Action("latest", "l", "Select the latest round", "view", show=False),
    Action("help", "f1", "Key bindings and workflow", "app"),
    Action("settings", "f2", "Settings (writes cudaforge.toml)", "app"),
    Action("leave_editor", "escape", "Leave the editor (keeps your changes)", "app", show=False),
    Action("quit", "ctrl+q", "Quit (asks before discarding a running round)", "app", priority=True),
)
ACTION_IDS = {a.id for a in ACTIONS}
DECISION_ACTIONS = frozenset(a.id for a in ACTIONS if a.group == "decide")  # answer the engine; none when browsing


def bindings() -> list[Binding]:
    """The App's BINDINGS, each with its id so [keymap] can remap it."""
    return [Binding(a.key, a.id, _short(a), show=a.show, priority=a.priority, id=a.id) for a in ACTIONS]


def _short(action: Action) -> str:
    return {"approve": "Approve", "edit": "Edit", "regenerate": "Regenerate", "branch": "Branch",
            "stop": "Stop", "diff": "Diff", "help": "Help", "settings": "Settings", "quit": "Quit"}.get(
        action.id, action.description.split(" (")[0])


def check_keymap(keymap: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The usable part of a [keymap] table and a message for every entry that names no action."""
    good: dict[str, str] = {}
    problems: list[str] = []
    for action_id, key in keymap.items():
        if action_id not in ACTION_IDS:
            problems.append(f"[keymap] {action_id!r} is not an action id (see the help screen, F1)")
        elif not isinstance(key, str) or not key.strip():
            problems.append(f"[keymap] {action_id} needs a key name such as \"ctrl+y\"")
        else:
            good[action_id] = key.strip()
    return good, problems


def effective_keys(keymap: Mapping[str, str]) -> dict[str, str]:
    """Action id -> the key that triggers it after [keymap] is applied (for help and palette)."""
    return {a.id: keymap.get(a.id, a.key) for a in ACTIONS}
