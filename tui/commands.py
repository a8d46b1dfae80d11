"""Command palette provider: every workbench action by name, with its current key."""

from __future__ import annotations

from functools import partial

from cudaforge.tui.keymap import ACTIONS
from textual.command import DiscoveryHit, Hit, Hits, Provider


class WorkbenchCommands(Provider):
    """Lists each action of keymap.ACTIONS; running one is the same as pressing its key."""

    def _keys(self) -> dict[str, str]:
        keys = getattr(self.app, "keys", None)
        return keys if isinstance(keys, dict) else {}

    def _title(self, action_id: str, description: str) -> str:
        key = self._keys().get(action_id, "")
        return f"{action_id.replace('_', ' ')} ({key})" if key else action_id.replace("_", " ")

    async def discover(self) -> Hits:
        for action in ACTIONS:
            yield DiscoveryHit(self._title(action.id, action.description),
                               partial(self.app.run_action, action.id), help=action.description)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for action in ACTIONS:
            title = self._title(action.id, action.description)
            score = max(matcher.match(title), matcher.match(action.description))
            if score > 0:
                yield Hit(score, matcher.highlight(title), partial(self.app.run_action, action.id),
                          help=action.description)
