"""Jobs before warm-ups at the per-GPU lock.

A spare's warm-up (its first kernels: the checks', after its CUDA context, which needs no hold:
engine/gpu/context.py) is a reader of the per-GPU lock (engine/gpu/rwlock.py): it runs side by side with
other readers and never inside a timed window. Among readers, a job goes first: a process
with a job announces it (a file named after its pid in `<lock>.jobs/`) while it waits at the GPU lock, and
an idle spare takes its read hold only while no live job is announced, so a warm-up for a *later* round
never sits between this round's job and the GPU. A spare that is handed a job while it warms announces that
job while it waits for each turn (not after: see acquire_as_job) and stops yielding. Announcements of dead
processes are ignored (and removed); an idle spare yields at most `max_yield_s`, so a stale file can delay a
warm-up, never stop it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from cudaforge.engine.gpu.lock import process_alive
from cudaforge.engine.gpu.rwlock import LOG_ENV, READ, Hold, acquire, log_event

_ANNOUNCED: list[Path] = []
# A warm-up that still yields after this long writes, once, which processes' announcements it waits for (the
# lock log, rwlock.LOG_ENV): in session 34's quarter sweep spares yielded 10-30 s (0.3 s in session 33's).
LOG_YIELD_AFTER_S = 5.0


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
        log_event("announce", "job")


def withdraw_job(lock_path: str | os.PathLike[str] | None = None) -> None:
    """This process holds the lock now (or gave up): its announcement goes."""
    for path in list(_ANNOUNCED):
        if lock_path is None or path.parent == jobs_dir(lock_path):
            with contextlib.suppress(OSError):
                path.unlink()
            _ANNOUNCED.remove(path)
            log_event("withdraw", "job")


def acquire_as_job(lock_path: str | os.PathLike[str], kind: str) -> Hold:
    """Take the GPU lock (`kind`) as a job: announced while it waits, so idle spares' warm-ups let it go first,
    and withdrawn once it holds the lock or gave up. Kept after that, an announcement held every idle spare
    back (session 34's sweep: a spare handed its job mid warm-up kept it through the rest of its warm-up and
    its job's wait for memory; spares yielded 10-30 s and jobs waited 62.7 s for them)."""
    announce_job(lock_path)
    try:
        return acquire(lock_path, kind)
    finally:
        withdraw_job(lock_path)


def jobs_waiting(lock_path: str | os.PathLike[str]) -> bool:
    """Whether a live process other than this one has announced a job for this lock."""
    return bool(announced_jobs(lock_path, first_only=True))


def announced_jobs(lock_path: str | os.PathLike[str], first_only: bool = False) -> list[int]:
    """The live processes other than this one that have announced a job for this lock (the first one found
    only, with `first_only`); announcements of dead processes are removed on the way."""
    try:
        entries = list(jobs_dir(lock_path).iterdir())
    except OSError:
        return []
    me = os.getpid()
    live = []
    for entry in entries:
        try:
            pid = int(entry.name)
        except ValueError:
            continue
        if pid == me:
            continue
        if process_alive(pid):
            live.append(pid)
            if first_only:
                break
            continue
        with contextlib.suppress(OSError):
            entry.unlink()
    return live


@contextlib.contextmanager
def warmup_turn(lock_path: str, has_job: Callable[[], bool], *, max_yield_s: float = 30.0,
                poll_s: float = 0.02) -> Iterator[float]:
    """Hold the GPU lock as a reader for a spare's warm-up, letting announced jobs go first; yields the
    seconds spent waiting. Once this spare has a job itself it waits like any job (acquire_as_job). The hold
    is released after the device is synchronized (rwlock.Hold.release)."""
    start = time.monotonic()
    logged = 0  # yields written to the lock log: the first, and one after LOG_YIELD_AFTER_S
    while True:
        if has_job() or time.monotonic() - start > max_yield_s:
            hold = acquire_as_job(lock_path, READ) if has_job() else acquire(lock_path, READ)
            break
        if not jobs_waiting(lock_path):
            hold = acquire(lock_path, READ)
            if not jobs_waiting(lock_path) or has_job():
                break
            hold.release(sync=None)  # a job was announced while we took it (no device work yet): it goes first
        elif logged < 2 and time.monotonic() - start >= (LOG_YIELD_AFTER_S if logged else 0.0) \
                and os.environ.get(LOG_ENV):
            logged += 1  # which processes' announcements it waits for
            log_event("yield", "jobs:" + (",".join(map(str, announced_jobs(lock_path))) or "-"))
        time.sleep(poll_s)
    try:
        yield time.monotonic() - start
    finally:
        hold.release()


def counters_path(lock_path: str | os.PathLike[str]) -> Path:
    """The GPU's performance-counter turn beside its lock."""
    return Path(f"{os.fspath(lock_path)}.counters")


@contextlib.contextmanager
def counters_turn(lock_path: str | os.PathLike[str] | None, has_job: Callable[[], bool], *,
                  poll_s: float = 0.01) -> Iterator[bool]:
    """The GPU's performance counters, one collector at a time across processes, for an ncu-wrapped spare's
    warm-up kernel. Two ncu processes that profile a kernel at once make the second fail ("a driver resource
    was unavailable") and ncu then kills its target: exit code 9, a dead spare (the H100, session 27: one or
    both of a session's first two profile spares, warming side by side). Their warm-ups hold the GPU lock as
    readers, which do not exclude each other; this turn does. Yields True with the turn held; False (no turn)
    once the spare has a job: its profile is a writer of the GPU lock, which no warm-up can overlap."""
    if not lock_path:
        yield True
        return
    from cudaforge.engine.gpu.rwlock import open_lock_file

    fd = open_lock_file(counters_path(lock_path))
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
                break
            except BlockingIOError:
                if has_job():
                    held = False
                    break
                time.sleep(poll_s)
        yield held
    finally:
        os.close(fd)  # the flock goes with the descriptor
