"""Key-press-to-render latency: from a key event's creation to the end of the screen refresh after
the App handled it. Recorded for every key during a session so the worst case can be reported
(tests and bench/gpu_tui_session.py print it; nothing gates on it)."""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field

_clock = time.perf_counter if sys.platform == "win32" else time.monotonic  # the clock Textual stamps events with


@dataclass
class LatencyProbe:
    samples_ms: list[tuple[str, float]] = field(default_factory=list)

    def record(self, key: str, created: float) -> None:
        self.samples_ms.append((key, (_clock() - created) * 1000.0))

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
