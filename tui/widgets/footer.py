"""Footer: Textual's, rebuilt only when the keys it shows change."""

from __future__ import annotations

from typing import Any

from textual.screen import Screen
from textual.widgets import Footer


class KeyFooter(Footer):
    """Textual's Footer remounts all of its key widgets whenever the screen's bindings change, and
    Textual signals that on every focus change: each pane switch (1-6, 0) rebuilt about a dozen
    widgets, half of the main thread's work for the key press (measured). The keys shown are
    nearly always the same, so compare them first."""

    _shown: tuple[Any, ...] | None = None

    def bindings_changed(self, screen: Screen[Any]) -> None:
        shown = self._shown_keys(screen)
        if self._bindings_ready and shown == self._shown:
            return
        super().bindings_changed(screen)
        if screen.app.app_focus and self.is_attached and screen is self.screen:
            self._shown = shown  # super() recomposes exactly in this case

    def _shown_keys(self, screen: Screen[Any]) -> tuple[Any, ...]:
        """What `Footer.compose` draws: the shown bindings with their state, and the palette key."""
        active = screen.active_bindings
        keys = tuple((binding, enabled, tooltip) for _, binding, enabled, tooltip in active.values() if binding.show)
        palette = active.get(self.app.COMMAND_PALETTE_BINDING)
        return keys, palette[1:] if palette else None, self.show_command_palette, self.compact
