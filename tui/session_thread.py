"""The Session runs on its own event loop in its own thread, not on the workbench's.

Why: everything a decision sets off in the engine used to run on the UI's event loop between two
frames: run-folder writes (each one fsync'd: 8 ms here, far more while other processes write),
starting the worker and the next spare (process starts), building prompts, the LLM SDK's request
work, reading and checking the worker's result, removing its folder. An approval (`a`) waited for
all of that before it was drawn: 270 ms to 1.2 s on a loaded 2-core machine. On a loop of its own,
that work never sits between a key and its frame; the GIL still switches every few ms, and file and
process work releases it.

The seams stay what they were: the Session posts its events through `App.post_message` (thread-safe
in Textual), answers reach the QueueDriver on the Session's loop (`answer`), `request_stop` and
friends only set flags. Cancelling the awaiting task (quit) cancels the Session on its loop and
waits for it to record 'cancelled' and close its workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import Callable
from typing import Any

SWITCH_INTERVAL_S = 0.001


class SessionThread:
    """Runs `session.run()` on a private loop in a thread (the Session closes its own workers)."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self._cancelled = False
        self._started = threading.Event()

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` on the Session's loop (e.g. the driver's `answer`)."""
        self._started.wait(10)
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(fn, *args)

    def _body(self) -> Any:
        loop = asyncio.new_event_loop()
        self.loop = loop

        async def main() -> Any:
            self._task = asyncio.current_task()
            self._started.set()
            if self._cancelled:
                raise asyncio.CancelledError
            return await self.session.run()

        try:
            return loop.run_until_complete(main())
        finally:
            self._started.set()
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _cancel(self) -> None:
        self._cancelled = True
        if self._task is not None and self.loop is not None and not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self._task.cancel)

    async def run(self) -> Any:
        """The Session's SessionStopped; cancelling this cancels the Session and waits for its end."""
        # While the Session's thread computes, the UI thread gets the GIL back after at most 1 ms
        # instead of 5 (measured over 100-key runs here: worst on `a` 249-256 ms vs 359-389 ms).
        interval = sys.getswitchinterval()
        sys.setswitchinterval(min(interval, SWITCH_INTERVAL_S))
        future = asyncio.get_running_loop().run_in_executor(None, self._body)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            self._cancel()
            with contextlib.suppress(BaseException):
                await future
            raise
        finally:
            sys.setswitchinterval(interval)
