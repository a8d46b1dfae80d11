"""Key-press-to-render latency: from a key event's creation to the end of the screen refresh after
the App handled it. Recorded for every key during a session so the worst case can be reported
(tests and bench/gpu_tui_session.py print it; nothing gates on it)."""

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
