"""Key-press-to-render latency: from a key event's creation to the end of the screen refresh after
the App handled it. Recorded for every key during a session so the worst case can be reported
(tests and bench/workbench_session.py print it; nothing gates on it)."""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field

_clock = time.perf_counter if sys.platform == "win32" else time.monotonic  # the clock Textual stamps events with
_OPEN = 64  # presses remembered for a second sighting (a handful are ever in flight)


@dataclass
class LatencyProbe:
    samples_ms: list[tuple[str, float]] = field(default_factory=list)
    # id(event) -> (event, its sample): the App sees most keys twice (see `record`)
    _open: dict[int, tuple[object, tuple[str, float]]] = field(default_factory=dict, repr=False)

    def record(self, key: str, created: float, event: object | None = None) -> None:
        """One sample per key press. Textual gives a key the App does not bind with priority to the
        focused widget, which hands it back to the App when it does not use it: the App sees that
        press twice, and the refresh after the second sighting (after the action ran) is the one
        the person waits for. Passing the event makes the later sighting replace the earlier one
        instead of adding a second, near-zero sample that halves the median."""
        sample = (key, (_clock() - created) * 1000.0)
        if event is not None:
            seen = self._open.get(id(event))
            if seen is not None and seen[0] is event:
                earlier = seen[1]
                for i in range(len(self.samples_ms) - 1, max(-1, len(self.samples_ms) - _OPEN - 1), -1):
                    if self.samples_ms[i] is earlier:
                        sample = max(earlier, sample, key=lambda s: s[1])
                        self.samples_ms[i] = sample
                        self._open[id(event)] = (event, sample)
                        return
            self._open[id(event)] = (event, sample)
            while len(self._open) > _OPEN:
                del self._open[next(iter(self._open))]
        self.samples_ms.append(sample)

    @property
    def worst_ms(self) -> float | None:
        return max((ms for _, ms in self.samples_ms), default=None)

    @property
    def worst_key(self) -> str | None:
        return max(self.samples_ms, key=lambda s: s[1])[0] if self.samples_ms else None

    @property
    def median_ms(self) -> float | None:
        return statistics.median(ms for _, ms in self.samples_ms) if self.samples_ms else None

    def summary(self) -> str:
        if not self.samples_ms:
            return "key latency: no key presses recorded"
        return (f"key-press-to-render latency over {len(self.samples_ms)} keys: worst {self.worst_ms:.1f} ms "
                f"(key {self.worst_key!r}), median {self.median_ms:.1f} ms")


class StallWatch:
    """Diagnostics, off unless `CUDAFORGE_TUI_STALLS=PATH` is set: a thread notices when the event
    loop has not ticked for `threshold_ms` and records what the main thread was running then (the
    innermost frames of ours, Textual's and the engine's), so a slow key can be traced to the code
    that blocked the loop. Written as JSON at exit."""

    def __init__(self, threshold_ms: float = 40.0, tick_ms: float = 5.0) -> None:
        import threading

        self.threshold_s = threshold_ms / 1000.0
        self.tick_s = tick_ms / 1000.0
        self.last = _clock()
        self.stalls: list[dict[str, object]] = []
        self._main = threading.main_thread().ident
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="cf-stall-watch", daemon=True)

    def start(self, loop: object) -> None:
        self._loop = loop
        self._beat()
        self._thread.start()

    def _beat(self) -> None:
        self.last = _clock()
        if not self._stop.is_set():
            self._loop.call_later(self.tick_s, self._beat)  # type: ignore[attr-defined]

    def _watch(self) -> None:
        import traceback

        current: dict[str, object] | None = None
        while not self._stop.wait(self.tick_s):
            late = _clock() - self.last
            if late > self.threshold_s:
                frame = sys._current_frames().get(self._main or 0)
                stack = [f"{f.filename.rsplit('/site-packages/', 1)[-1]}:{f.lineno} {f.name}"
                         for f in traceback.extract_stack(frame)[-14:]] if frame is not None else []
                if current is None:
                    current = {"at": _clock(), "ms": 0.0, "stacks": []}
                    self.stalls.append(current)
                current["ms"] = round(late * 1000.0, 1)
                stacks = current["stacks"]
                assert isinstance(stacks, list)
                if len(stacks) < 6 and (not stacks or stacks[-1] != stack):
                    stacks.append(stack)
            else:
                current = None

    def stop(self, path: str) -> None:
        import json

        self._stop.set()
        worst = sorted(self.stalls, key=lambda s: -float(s["ms"]))  # type: ignore[arg-type]
        with open(path, "w", encoding="utf-8") as fh:
            json.dump({"stalls": worst}, fh, indent=1)
