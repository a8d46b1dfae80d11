"""Python's cyclic garbage collector, kept short while the workbench runs.

Measured on a 2-core machine: a full (generation-2) collection walks every tracked object, about
300k once torch, the engine and Textual are loaded, and paused the event loop 150-330 ms, every few
seconds while keys were pressed (Textual's rendering allocates fast). Those pauses were the worst
key-press-to-render latencies while a round ran. Freezing the heap the app has after start-up and
after the session is built takes those objects out of every later collection (they are long-lived
anyway): full collections then walk only what was allocated since. Modules imported later (the LLM
SDK and pydantic at the first Coder call: some 40k objects) are frozen too, at the next engine event.

Deferring full collections to pauses in typing was tried and dropped: Textual leaves about 7000
objects of cyclic garbage a second while keys are pressed, so a deferred collection grows longer
than the ones it replaces.
"""

from __future__ import annotations

import gc
import sys


class HeapFreezer:
    """`freeze` at the moments the heap has grown by long-lived objects; `stop` when the app ends."""

    def __init__(self) -> None:
        self._ours = False
        self._modules = 0  # len(sys.modules) at the last freeze

    def freeze(self) -> None:
        """Move every object alive now out of the collector's reach (O(1)). Cyclic garbage alive at
        this moment is never freed: a one-off, small next to the pauses it saves."""
        self._ours = self._ours or gc.get_freeze_count() == 0
        gc.collect(1)  # the young generations' garbage first (a few ms), so it is not frozen with them
        gc.freeze()
        self._modules = len(sys.modules)

    def after_imports(self) -> None:
        """Freeze again if modules were imported since the last freeze: they live as long as the process."""
        if len(sys.modules) != self._modules:
            self.freeze()

    def stop(self) -> None:
        """Hand the objects back to the collector, unless someone froze the heap before the app did
        (then it stays as they left it)."""
        if self._ours:
            gc.unfreeze()
            self._ours = False
