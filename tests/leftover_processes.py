"""Processes a test module left running after it ended: found, named and killed, so that one module's leak
(a Ray node, a killed driver's workers, a spare whose app died) cannot starve the modules after it on a
2-core CI machine, and so that the run's summary says what leaked where.

A process is this run's when its environment carries RUN_VAR's token (set by conftest before any test
starts; the sandbox passes it on, as it is no credential). It is left over when it is not a descendant of
the pytest process: its own parent is gone (it was re-parented) or it was started in a detached tree."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

RUN_VAR = "CUDAFORGE_TEST_RUN"
GRACE_S = 3.0  # an orphan that is already on its way out (a zygote that saw its app go) is not a leak


@dataclass(frozen=True)
class Leftover:
    pid: int
    command: str


def mark_this_run() -> str:
    """Put this pytest process's own token in the environment every process it starts from now on inherits.
    Never the one it inherited: under pytest-xdist every worker inherits the controller's, so each worker
    took its siblings (not its descendants) for leftovers and killed them (the H200's `tests` step,
    session 18: 18 failures, every worker "node down")."""
    token = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    os.environ[RUN_VAR] = token
    return token


def _carries(pid: int, entry: bytes) -> bool:
    """Whether `pid`'s environment holds exactly this entry (a zombie's reads empty: never)."""
    try:
        return entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:160]
    except OSError:
        return "?"


def find(token: str) -> list[Leftover]:
    """This run's processes that are not the pytest process's descendants (those carrying the token are
    listed first, then the descendants: a child started in between is in neither list, not a leftover)."""
    if not Path("/proc/self/environ").exists():
        return []
    from cudaforge.engine.evaluation.sandbox import _descendants

    entry = f"{RUN_VAR}={token}".encode()
    me = os.getpid()
    carriers = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and int(p.name) != me
                and _carries(int(p.name), entry)]
    ours = set(_descendants(me))
    return [Leftover(pid, _command(pid)) for pid in sorted(carriers) if pid not in ours]


def reap(token: str) -> list[Leftover]:
    """Wait the grace for leftovers to end on their own, then kill the rest; what had to be killed."""
    deadline = time.monotonic() + GRACE_S
    left = find(token)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = find(token)
    for proc in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signal.SIGKILL)
    return left
