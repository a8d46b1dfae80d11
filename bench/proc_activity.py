"""Which processes used the host's CPUs when, sampled from /proc (Linux), for lining a timed window up with
what else ran meanwhile (bench/timing_fidelity.py --proc-samples).

A thread reads every process's cumulative CPU time (/proc/<pid>/stat: utime + stime) every `interval_s`;
`between(t0, t1)` then says which processes used how much CPU in [t0, t1] (epoch seconds), the window's
`HostLoad.started_at` and its wall. Reading /proc costs this process a few ms per sample: a diagnostic,
off unless asked for.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cudaforge.engine.procstat import TICKS_PER_S, read_stat


@dataclass(frozen=True)
class ProcessCpu:
    """One process's CPU seconds within an interval, with what it is (its command line, shortened)."""

    pid: int
    label: str
    cpu_s: float


def _label(pid: int, comm: str) -> str:
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return comm
    words = [a.decode(errors="replace") for a in args if a]
    if not words:
        return comm
    tail = " ".join(Path(words[0]).name if i == 0 else w for i, w in enumerate(words[:4]))
    return tail[:90]


def _read_cpu() -> dict[int, tuple[str, int]]:
    """pid -> (comm, utime + stime in clock ticks), for every process readable now."""
    out: dict[int, tuple[str, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        stat = read_stat(f"/proc/{entry.name}/stat")
        if stat is None:
            continue
        try:  # utime and stime
            out[int(entry.name)] = (stat.comm, stat.field(14) + stat.field(15))
        except (IndexError, ValueError):
            continue
    return out


class ProcessActivity:
    """Samples every process's CPU time from a thread of its own; `between` reads the samples."""

    def __init__(self, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self.samples: list[tuple[float, dict[int, tuple[str, int]]]] = []
        self.labels: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="proc-activity", daemon=True)

    def __enter__(self) -> ProcessActivity:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            at, cpu = time.time(), _read_cpu()
            for pid, (comm, _) in cpu.items():
                if pid not in self.labels:
                    self.labels[pid] = _label(pid, comm)
            self.samples.append((at, cpu))
            self._stop.wait(self.interval_s)

    def between(self, t0: float, t1: float, top: int = 6) -> tuple[float, list[ProcessCpu]]:
        """(all processes' CPU seconds per wall second in [t0, t1], i.e. busy cores; the `top` processes by
        CPU seconds there), from the samples nearest outside the interval. A process that started within
        it counts from zero; one that ended within it, up to its last sample."""
        inside = [s for s in self.samples if t0 < s[0] < t1]
        before = [s for s in self.samples if s[0] <= t0]
        after = [s for s in self.samples if s[0] >= t1]
        if not before or not after:
            return 0.0, []
        (a, first), b = before[-1], after[0][0]
        seen: dict[int, tuple[str, int]] = {}
        for _, cpu in [*inside, after[0]]:
            seen.update(cpu)
        used = [ProcessCpu(pid, self.labels.get(pid, comm), (ticks - first.get(pid, (comm, 0))[1]) / TICKS_PER_S)
                for pid, (comm, ticks) in seen.items()]
        used = [u for u in used if u.cpu_s > 0]
        total = sum(u.cpu_s for u in used)
        return total / max(b - a, 1e-9), sorted(used, key=lambda u: -u.cpu_s)[:top]
