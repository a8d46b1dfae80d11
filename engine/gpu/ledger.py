"""Admission by memory: what our evaluations sharing a GPU have reserved, so side-by-side work never
runs the card out of memory.

One small JSON record per GPU (`gpuN.lock.memory.json`), read and written only under its own flock
(`gpuN.lock.memory.lock`). An evaluation reserves its memory estimate (engine/worker/memory.py) before its
first GPU step and keeps it until it lets the GPU go for good: its tensors stay on the device between its
read holds and its timed window. A reservation is admitted when it fits beside the live ones within the
budget (the card's memory that is not another user's: see engine/worker/pipeline.py), or when no other
live reservation exists (alone, the fit check before the build has already said it fits). Entries of dead
processes (pid gone, or reused by another process) are dropped whenever the record is read.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from cudaforge.engine.fsutil import atomic_write_json
from cudaforge.engine.gpu.lock import process_alive, process_start
from cudaforge.engine.gpu.rwlock import open_lock_file


@dataclass(frozen=True)
class Entry:
    """One live reservation: whose (pid and its start time, so a reused pid is not taken for it) and how much."""

    pid: int
    start: str
    nbytes: int
    label: str
    since: float


def ledger_path(lock_path: str | os.PathLike[str]) -> Path:
    return Path(f"{os.fspath(lock_path)}.memory.json")


@contextlib.contextmanager
def _guard(lock_path: str | os.PathLike[str]) -> Iterator[None]:
    fd = open_lock_file(Path(f"{os.fspath(lock_path)}.memory.lock"))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the flock


def _read(lock_path: str | os.PathLike[str]) -> list[Entry]:
    try:
        raw = json.loads(ledger_path(lock_path).read_text())
        return [Entry(**e) for e in raw.get("entries", [])]
    except (OSError, ValueError, TypeError, AttributeError):
        return []


def _write(lock_path: str | os.PathLike[str], entries: list[Entry]) -> None:
    atomic_write_json(ledger_path(lock_path), {"entries": [asdict(e) for e in entries]})


def _live(entries: list[Entry]) -> list[Entry]:
    return [e for e in entries if process_alive(e.pid, e.start)]


def live_entries(lock_path: str | os.PathLike[str]) -> list[Entry]:
    """The live reservations (dead processes' entries dropped from the record)."""
    with _guard(lock_path):
        entries = _read(lock_path)
        live = _live(entries)
        if len(live) != len(entries):
            _write(lock_path, live)
        return live


def reserved_bytes(lock_path: str | os.PathLike[str]) -> int:
    return sum(e.nbytes for e in live_entries(lock_path))


@dataclass
class Reservation:
    """This process's reservation; `waited_s` is how long admission took."""

    lock_path: str
    nbytes: int
    waited_s: float
    released: bool = False

    def release(self) -> None:
        """Give the reserved memory back (after the memory itself is freed)."""
        if self.released:
            return
        self.released = True
        me = os.getpid()
        with _guard(self.lock_path):
            entries = _live(_read(self.lock_path))
            mine = next((e for e in entries if e.pid == me and e.nbytes == self.nbytes), None)
            if mine is not None:
                entries.remove(mine)
            _write(self.lock_path, entries)

    def resize(self, nbytes: int, budget: int | Callable[[], int], *, poll_s: float = 0.02,
               timeout_s: float | None = None) -> bool:
        """Grow (or shrink) this reservation to `nbytes`, admitted as a new one would be (beside the others'
        within `budget`, or alone); False after `timeout_s` without admission, the reservation as it was.
        Two processes that each wait to grow beside the other can both be refused for good: the caller
        gives up after its timeout rather than waiting for ever."""
        if _until_admitted(self.lock_path, budget, lambda limit: self._try_resize(nbytes, limit), poll_s,
                           timeout_s) is None:
            return False
        self.nbytes = int(nbytes)
        return True

    def _try_resize(self, nbytes: int, budget: int) -> bool:
        me = os.getpid()
        with _guard(self.lock_path):
            entries = _live(_read(self.lock_path))
            if not _admits(entries, nbytes, budget):
                return False
            mine = next((e for e in entries if e.pid == me and e.nbytes == self.nbytes), None)
            if mine is not None:
                entries.remove(mine)
            entries.append(Entry(pid=me, start=process_start(me), nbytes=int(nbytes),
                                 label=mine.label if mine else "", since=mine.since if mine else time.time()))
            _write(self.lock_path, entries)
            return True


def _admits(entries: list[Entry], nbytes: int, budget: int) -> bool:
    """The admission rule: `nbytes` of this process fit beside the other processes' live reservations within
    `budget`, or no other process has one."""
    me = os.getpid()
    others = [e for e in entries if e.pid != me]
    return not others or sum(e.nbytes for e in others) + nbytes <= budget


def _until_admitted(lock_path: str | os.PathLike[str], budget: int | Callable[[], int],
                    attempt: Callable[[int], bool], poll_s: float, timeout_s: float | None) -> float | None:
    """Call `attempt(limit)` until it is admitted: the seconds that took, None after `timeout_s`. A callable
    `budget` is asked outside the record's lock, and only while another process holds a reservation
    (alone, no budget is needed)."""
    start = time.monotonic()
    me = os.getpid()
    while True:
        limit = budget if isinstance(budget, int) else \
            (budget() if any(e.pid != me for e in live_entries(lock_path)) else 0)
        if attempt(limit):
            return time.monotonic() - start
        if timeout_s is not None and time.monotonic() - start > timeout_s:
            return None
        time.sleep(poll_s)


def try_reserve(lock_path: str | os.PathLike[str], nbytes: int, budget: int, label: str = "") -> bool:
    """Reserve `nbytes` now if it fits beside the live reservations within `budget`, or if no other process
    has a live reservation; False when it does not fit."""
    me = os.getpid()
    with _guard(lock_path):
        recorded = _read(lock_path)
        entries = _live(recorded)
        ok = _admits(entries, nbytes, budget)
        if ok:
            entries.append(Entry(pid=me, start=process_start(me), nbytes=int(nbytes), label=label, since=time.time()))
        if ok or len(entries) != len(recorded):  # also drops the dead processes' entries
            _write(lock_path, entries)
        return ok


def reserve(lock_path: str | os.PathLike[str], nbytes: int, budget: int | Callable[[], int], *, label: str = "",
            poll_s: float = 0.02, timeout_s: float | None = None) -> Reservation | None:
    """Wait until `nbytes` is admitted (see the module docstring) and return the reservation; None after
    `timeout_s` without admission (_until_admitted)."""
    waited = _until_admitted(lock_path, budget, lambda limit: try_reserve(lock_path, nbytes, limit, label), poll_s,
                             timeout_s)
    if waited is None:
        return None
    return Reservation(lock_path=os.fspath(lock_path), nbytes=int(nbytes), waited_s=waited)
