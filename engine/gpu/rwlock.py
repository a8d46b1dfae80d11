"""The per-GPU reader/writer lock across processes: only timed windows and ncu runs hold the GPU alone.

Two flock files per GPU (docs/ARCHITECTURE.md, "Sharing the GPU"):
- `gpuN.lock`: readers hold it shared, writers exclusive.
- `gpuN.lock.writers`: the writers' turnstile. A writer holds it *shared* from the moment it wants the GPU
  until it lets the GPU go; a reader takes it *exclusive* for an instant (no writer waiting or holding),
  takes `gpuN.lock` shared under it, and lets it go. So a waiting writer blocks every later reader (writer
  preference: timing is never starved), and no reader ever holds the GPU lock while a writer holds it.

A hold is never converted from shared to exclusive (flock's conversion is not atomic: another process can
take the lock in between): a process that wants to write releases its read hold and acquires a write hold.
A reader synchronizes its device before it releases (the `sync` callable), so none of its queued kernels
runs into the next timed window. Locks of a dead process go with it (the kernel drops its flocks), so a
crashed worker never leaves the GPU locked. File descriptors are close-on-exec: a build tool started under
a hold does not keep it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

READ = "read"
WRITE = "write"
_HELD: list[Hold] = []  # this process's live holds: a write hold under a read hold would wait for itself
LOG_ENV = "CUDAFORGE_LOCK_LOG"  # a file: every want, got and drop of every process is appended to it
# What this process is doing, for the log's lines (the worker sets it to its phase; spares say "spare").
STEP_LABEL: list[Callable[[], str | None]] = [lambda: None]


def log_event(event: str, kind: str) -> None:
    """One line of the lock log (LOG_ENV), when asked for: bench/lock_timeline.py rebuilds from it who held,
    waited for and drained the GPU when (events want, got, drop, gave_up of kind read or write), and when
    driver work that takes no hold but may slow other processes' happened: begin and end of kind context
    (engine/gpu/context.py, after a `wait` for a gap between windows where it had to wait), of kinds pin and
    unpin (a large host buffer's page-lock and unlock, engine/worker/host_buffers.py), and the begin of a
    worker's exit (kind exit: its context's teardown follows). One O_APPEND write per line, so processes
    never interleave."""
    target = os.environ.get(LOG_ENV)
    if not target:
        return
    with contextlib.suppress(Exception):
        step = STEP_LABEL[0]() or ""
        line = f"{time.time():.6f} {os.getpid()} {event} {kind} {step.replace(' ', '_') or '-'}\n"
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def writers_path(lock_path: str | os.PathLike[str]) -> Path:
    """The writers' turnstile beside the GPU lock."""
    return Path(f"{os.fspath(lock_path)}.writers")


def open_lock_file(path: Path) -> int:
    """A lock file's descriptor for flock (made, with its private folder, if missing; closed on exec)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def _flock(fd: int, op: int) -> None:
    while True:
        try:
            fcntl.flock(fd, op)
            return
        except InterruptedError:  # a signal during a blocking wait: wait on
            continue


def device_sync() -> None:
    """Wait for this process's queued device work (CUDA only, and only when torch already runs CUDA here):
    what a reader does before it lets the GPU go."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return
    with contextlib.suppress(Exception):
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()


@dataclass(eq=False)
class Hold:
    """One read or write hold of a GPU lock; `waited_s` is how long it waited for it."""

    kind: str
    lock_path: str
    waited_s: float
    _fds: list[int] = field(default_factory=list, repr=False)

    @property
    def held(self) -> bool:
        return bool(self._fds)

    def release(self, sync: Callable[[], None] | None = device_sync) -> None:
        """Let the GPU go: first the device's queued work (`sync`), then the GPU lock, then (a writer) the
        turnstile, so waiting readers come in only once the timed window is over."""
        if not self._fds:
            return
        try:
            if sync is not None:
                sync()
        finally:
            fds, self._fds = self._fds, []
            log_event("drop", self.kind)
            with contextlib.suppress(ValueError):
                _HELD.remove(self)
            for fd in fds:  # the GPU lock first, then the turnstile
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)
                with contextlib.suppress(OSError):
                    os.close(fd)


def acquire(lock_path: str | os.PathLike[str], kind: str) -> Hold:
    """Block until this process holds the GPU lock as a reader (side by side with other readers) or a
    writer (alone); see the module docstring for the protocol."""
    if kind not in (READ, WRITE):
        raise ValueError(f"a GPU hold is {READ!r} or {WRITE!r}, not {kind!r}")
    path = Path(lock_path)
    if kind == WRITE and any(h.lock_path == os.fspath(path) and h.held for h in _HELD):
        raise RuntimeError("a write hold was asked while this process holds the GPU lock: release it first "
                           "(a hold is never upgraded)")
    start = time.monotonic()
    log_event("want", kind)
    turnstile = open_lock_file(writers_path(path))
    main = open_lock_file(path)
    try:
        if kind == WRITE:
            _flock(turnstile, fcntl.LOCK_SH)  # from now on no new reader comes in
            _flock(main, fcntl.LOCK_EX)  # wait for the readers already in (and other writers)
            fds = [main, turnstile]
        else:
            _flock(turnstile, fcntl.LOCK_EX)  # no writer waits or holds
            try:
                _flock(main, fcntl.LOCK_SH)  # immediate: a writer that holds the lock also holds the turnstile
            finally:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
            os.close(turnstile)
            fds = [main]
    except BaseException:
        log_event("gave_up", kind)
        for fd in (main, turnstile):
            with contextlib.suppress(OSError):
                os.close(fd)
        raise
    h = Hold(kind=kind, lock_path=os.fspath(path), waited_s=time.monotonic() - start, _fds=fds)
    log_event("got", kind)
    _HELD.append(h)
    return h


def writer_waiting(lock_path: str | os.PathLike[str]) -> bool:
    """Whether a writer waits for (or holds) the GPU: its shared hold of the turnstile blocks an exclusive
    try. A reader passing through the turnstile for an instant also answers True (a needless yield, never a
    missed one). Costs an open and two non-blocking flocks: readers ask at their step boundaries."""
    try:
        fd = open_lock_file(writers_path(lock_path))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # BlockingIOError: held shared by a writer
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


BETWEEN_WINDOWS_LIMIT_S = 3.0  # then the work starts anyway: longer than 99 % of the H200 sweep's busy spells
BETWEEN_WINDOWS_POLL_S = 0.005


def between_windows(lock_path: str | os.PathLike[str], stop: Callable[[], bool] = lambda: False,
                    limit_s: float = BETWEEN_WINDOWS_LIMIT_S, kind: str = "") -> float:
    """Wait, holding nothing, until no writer waits for or holds the GPU (or `stop()` says go, or `limit_s`
    passed); the seconds waited. For work that needs no hold but slows other processes' driver calls while
    it runs, a CUDA context's creation: in the H200 sweep of session 39 a timed window's CUPTI start took a
    median 58 ms where a context creation overlapped the window, 9 ms where none did (134 and 113 windows),
    and half the creations began while a window waited or held the GPU. A writer that comes meanwhile is
    not held up: the work takes no hold, so it only starts between windows. A wait is logged as `wait` of
    `kind` (when given) for bench/lock_timeline.py; the work's own `begin` ends it."""
    start = time.monotonic()
    if not writer_waiting(lock_path):
        return 0.0
    if kind:
        log_event("wait", kind)
    while not stop() and time.monotonic() - start < limit_s:
        time.sleep(BETWEEN_WINDOWS_POLL_S)
        if not writer_waiting(lock_path):
            break
    return time.monotonic() - start


@contextlib.contextmanager
def hold(lock_path: str | os.PathLike[str], kind: str,
         sync: Callable[[], None] | None = device_sync) -> Iterator[Hold]:
    """`with hold(path, "read"):` ... the hold is released (after `sync`) on leaving the block."""
    h = acquire(lock_path, kind)
    try:
        yield h
    finally:
        h.release(sync)
