"""One reader of /proc/<pid>/stat lines (Linux, proc(5)): the command name sits in parentheses and may itself
hold spaces and parentheses, so the fields are split after the line's last ")". Read here: a process's
identity and zombie state (engine/gpu/lock.py), a worker's age (engine/worker/entry.py), the timing window's
CPU (engine/worker/timing.py) and the benches' per-process CPU time (bench/proc_activity.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# The unit of /proc's times (stat's utime, stime, start time; /proc/stat's cpu lines): clock ticks per second.
TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class ProcStat:
    """A stat line: the command name and the fields after it (proc(5)'s fields 3 onwards)."""

    comm: str
    rest: tuple[bytes, ...]

    def text(self, number: int) -> str:
        """proc(5)'s field `number` (1-based: 3 the state, 14 utime, 15 stime, 22 the start time, 39 the CPU
        last run on); IndexError where the line has no such field after the command name."""
        if number < 3:
            raise IndexError(f"field {number} is the pid or the command name, not a field after them")
        return self.rest[number - 3].decode(errors="replace")

    def field(self, number: int) -> int:
        """Field `number` as an integer (ValueError where it is not one)."""
        return int(self.text(number))


def parse_stat(raw: bytes) -> ProcStat | None:
    """A stat line's parts; None where it has no command name in parentheses."""
    open_at, close_at = raw.find(b"("), raw.rfind(b")")
    if open_at < 0 or close_at < open_at:
        return None
    return ProcStat(comm=raw[open_at + 1:close_at].decode(errors="replace"), rest=tuple(raw[close_at + 2:].split()))


def read_stat(path: str | Path) -> ProcStat | None:
    """The stat file at `path` (/proc/<pid>/stat, /proc/thread-self/stat); None where it cannot be read."""
    try:
        return parse_stat(Path(path).read_bytes())
    except OSError:
        return None
