"""Jobs before warm-ups at the per-GPU lock.

A spare's warm-up (CUDA context creation) is a reader of the per-GPU lock (engine/gpu/rwlock.py): it runs
side by side with other readers and never inside a timed window. Among readers, a job goes first: a process
with a job announces it (a file named after its pid in `<lock>.jobs/`) while it waits at the GPU lock, and
an idle spare takes its read hold only while no live job is announced, so a warm-up for a *later* round
never sits between this round's job and the GPU. A spare that is handed a job while it warms announces that
job and stops yielding. Announcements of dead processes are ignored (and removed); an idle spare yields at
most `max_yield_s`, so a stale file can delay a warm-up, never stop it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from cudaforge.engine.gpu.lock import process_alive

_ANNOUNCED: list[Path] = []


def jobs_dir(lock_path: str | os.PathLike[str]) -> Path:
    return Path(f"{os.fspath(lock_path)}.jobs")


def announce_job(lock_path: str | os.PathLike[str] | None) -> None:
    """Say that this process has a job and will want the GPU lock (idempotent)."""
    if not lock_path:
        return
    path = jobs_dir(lock_path) / str(os.getpid())
    if path in _ANNOUNCED:
        return
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.touch()
        _ANNOUNCED.append(path)


def withdraw_job(lock_path: str | os.PathLike[str] | None = None) -> None:
    """This process holds the lock now (or gave up): its announcement goes."""
    for path in list(_ANNOUNCED):
        if lock_path is None or path.parent == jobs_dir(lock_path):
            with contextlib.suppress(OSError):
                path.unlink()
            _ANNOUNCED.remove(path)


def jobs_waiting(lock_path: str | os.PathLike[str]) -> bool:
    """Whether a live process other than this one has announced a job for this lock."""
    try:
        entries = list(jobs_dir(lock_path).iterdir())
    except OSError:
        return False
    me = os.getpid()
    for entry in entries:
        try:
            pid = int(entry.name)
        except ValueError:
            continue
        if pid == me:
            continue
        if process_alive(pid):
            return True
        with contextlib.suppress(OSError):
            entry.unlink()
    return False


@contextlib.contextmanager
def warmup_turn(lock_path: str, has_job: Callable[[], bool], *, max_yield_s: float = 30.0,
                poll_s: float = 0.02) -> Iterator[float]:
    """Hold the GPU lock as a reader for a spare's warm-up, letting announced jobs go first; yields the
    seconds spent waiting. Once this spare has a job itself it announces it and waits like any job. The
    hold is released after the device is synchronized (rwlock.Hold.release)."""
    from cudaforge.engine.gpu.rwlock import READ, acquire

    start = time.monotonic()
    while True:
        if has_job() or time.monotonic() - start > max_yield_s:
            if has_job():
                announce_job(lock_path)
            hold = acquire(lock_path, READ)
            break
        if not jobs_waiting(lock_path):
            hold = acquire(lock_path, READ)
            if not jobs_waiting(lock_path) or has_job():
                break
            hold.release(sync=None)  # a job was announced while we took it (no device work yet): it goes first
        time.sleep(poll_s)
    try:
        yield time.monotonic() - start
    finally:
        hold.release()


# How many spares may create their CUDA context at once, across all our processes on this GPU (0: no limit).
# Concurrent context creations slow each other: in three sweeps' lock logs a spare's context turn took
# 0.45-0.65 s (median) alone and 1.6-2.6 s beside four or more others (bench/lock_timeline.py context_turns),
# and a timed window that comes meanwhile waits for all of them (spares' warm-ups were the last reader of
# 67-99 windows, about 30 s of each H200 sweep's drain). Taken one or two at a time, each turn is short.
CONTEXT_TURNS_ENV = "CUDAFORGE_CONTEXT_TURNS"


def context_slots() -> int:
    """The limit in force (CONTEXT_TURNS_ENV; unset, empty or not a whole number: 0, no limit)."""
    try:
        return max(0, int(os.environ.get(CONTEXT_TURNS_ENV, "0") or 0))
    except ValueError:
        return 0


def context_slot_path(lock_path: str | os.PathLike[str], index: int) -> Path:
    return Path(f"{os.fspath(lock_path)}.contexts.{index}")


@contextlib.contextmanager
def context_turn(lock_path: str | None, has_job: Callable[[], bool], *, slots: int | None = None,
                 poll_s: float = 0.01) -> Iterator[float]:
    """One of `slots` context-creation slots (flocks beside the GPU lock, `<lock>.contexts.<i>`), held around a
    spare's context turn (taken before its read hold, let go after it); yields the seconds spent waiting for
    one. Without a lock or a limit it takes nothing. A spare that has a job (a round waits for it) stops
    waiting and creates its context at once: the limit shortens drains, it never holds a round back. A
    slot of a dead process is free (the kernel drops its flocks)."""
    import fcntl

    n = context_slots() if slots is None else slots
    start = time.monotonic()
    if not lock_path or n <= 0:
        yield 0.0
        return
    fds: list[int] = []
    held: int | None = None
    try:
        for i in range(n):
            path = context_slot_path(lock_path, i)
            with contextlib.suppress(OSError):
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                fds.append(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
        while fds and held is None:
            for fd in fds:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:  # held by another spare (or interrupted): the next slot
                    continue
                held = fd
                break
            if held is None:
                if has_job():
                    break
                time.sleep(poll_s)
        yield time.monotonic() - start
    finally:
        for fd in fds:  # closing a descriptor drops its flock
            with contextlib.suppress(OSError):
                os.close(fd)
