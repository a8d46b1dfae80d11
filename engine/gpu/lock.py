"""One file lock per GPU, so evaluations, timings and profiles of different sessions never overlap."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from cudaforge.engine.gpu.specs import smi_device_selector
from cudaforge.engine.procstat import read_stat

# Every sandboxed process (engine/evaluation/sandbox.py) carries this variable: how our GPU processes are told
# apart from others' (the lock layer needs it, and must not import the app side of an evaluation).
MARKER_VAR = "CUDAFORGE_SANDBOX_ID"


def gpu_lock_dir() -> Path:
    """Where the per-GPU locks live: one place per user and machine (not per cache dir), so two
    sessions or test runs with different cache dirs still never time on the same GPU at once.
    `CUDAFORGE_LOCK_DIR` overrides it."""
    env = os.environ.get("CUDAFORGE_LOCK_DIR")
    if env:
        return Path(env)
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"cudaforge-locks-{uid}"


def gpu_lock_path(gpu: int) -> Path:
    """The lock file shared by every evaluation, timing, profile and spare warm-up on `gpu`."""
    lock_dir = gpu_lock_dir()
    lock_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    return lock_dir / f"gpu{gpu}.lock"


def parse_compute_apps(text: str) -> list[dict[str, object]]:
    """Rows of `nvidia-smi --query-compute-apps=pid,used_memory,process_name --format=csv,noheader,nounits`."""
    rows: list[dict[str, object]] = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",", 2)]
        if len(parts) < 2 or not parts[0].isdigit():
            continue
        memory = int(parts[1]) if parts[1].isdigit() else None
        rows.append({"pid": int(parts[0]), "memory_mib": memory, "name": parts[2] if len(parts) > 2 else ""})
    return rows


def is_cudaforge_process(pid: int) -> bool:
    """Whether `pid` is one of this user's cudaforge workers or spares: every sandboxed process carries
    the sandbox marker variable (MARKER_VAR) in its environment, which only its own user can read."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return any(item.startswith(MARKER_VAR.encode() + b"=") for item in environ.split(b"\0"))


def process_start(pid: int) -> str:
    """The start time of `pid` (clock ticks since boot, /proc/PID/stat field 22; "" when unreadable): with
    the pid, it names one process, so a record of a dead process is not taken for a later one with its pid."""
    stat = read_stat(f"/proc/{pid}/stat")
    try:
        return stat.text(22) if stat is not None else ""
    except IndexError:
        return ""


def process_alive(pid: int, start: str = "") -> bool:
    """Whether `pid` runs (not a zombie) and, when `start` is given, is still the process that had it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = read_stat(f"/proc/{pid}/stat")
    if stat is None:
        return True
    with contextlib.suppress(IndexError):
        if stat.text(3) == "Z":  # exited, not yet reaped by its supervisor: it no longer holds anything
            return False
        if start and stat.text(22) != start:
            return False
    return True


def process_command(pid: int, limit: int = 120) -> str:
    """The command line of `pid` (shortened), or "" when it cannot be read."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:limit]


def _compute_apps(gpu: int) -> list[dict[str, object]]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, "--query-compute-apps=pid,used_memory,process_name", "--format=csv,noheader,nounits",
                              "-i", smi_device_selector(gpu)], capture_output=True, text=True, timeout=5, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_compute_apps(out)


def process_usage(gpu: int) -> dict[int, int]:
    """pid -> device bytes of every compute process on `gpu`: from NVML in-process (microseconds), else from
    nvidia-smi (empty when neither can tell; a process whose usage is not reported counts 0)."""
    from cudaforge.engine.gpu import nvml

    rows = nvml.compute_processes(gpu)
    if rows is not None:
        return {pid: int(used or 0) for pid, used in rows.items()}
    return {int(row["pid"]): int(row["memory_mib"] or 0) << 20  # type: ignore[call-overload]
            for row in _compute_apps(gpu)}


CONTEXT_BYTES = 768 << 20  # one CUDA context (+ its module images) of each of our processes on the card


@dataclass(frozen=True)
class CardShare:
    """The card's free memory and what our other processes hold on it, read as of one moment."""

    free_bytes: int
    ours: tuple[tuple[int, int], ...]  # (pid, bytes) of our other processes both listings saw: the smaller reading
    our_processes: int  # our other processes either listing saw (each holds a CUDA context)

    @property
    def free_with_ours(self) -> int:
        """Free memory plus what our other processes hold (they free it before they let the GPU go)."""
        return self.free_bytes + sum(used for _, used in self.ours)

    def budget(self) -> int:
        """The bytes our processes may reserve together in the memory ledger (engine/gpu/ledger.py): the free
        memory plus what our other processes hold (their reservations count instead), less one context
        for each of them (a context that is not there yet is reserved by its own process: context.py)."""
        return self.free_with_ours - CONTEXT_BYTES * self.our_processes

    def held_by(self, pid: int) -> int | None:
        """What one of our other processes counts as holding, None where it is not counted."""
        return next((used for p, used in self.ours if p == pid), None)


def card_share(gpu: int, read_free: Callable[[], int | None]) -> CardShare | None:
    """`read_free()` (the card's free memory) between two listings of our other processes' usage; None when
    it cannot say. A process's usage counts as the smaller of its two readings: an allocation made between
    a listing and the free reading is then never counted twice (once in the free memory before it, once
    in the usage after it), which a budget read as free-then-nvidia-smi did on the H200 sweep of session
    33, admitting more than the card held. A process in one listing only counts no usage (it came or went
    meanwhile), but its context does."""
    me = os.getpid()
    before = process_usage(gpu)
    free = read_free()
    after = process_usage(gpu)
    if free is None:
        return None
    ours = sorted(p for p in set(before) | set(after) if p != me and is_cudaforge_process(p))
    held = tuple((p, min(before[p], after[p])) for p in ours if p in before and p in after)
    return CardShare(free_bytes=int(free), ours=held, our_processes=len(ours))


def foreign_gpu_processes(gpu: int, exclude: Iterable[int] = ()) -> list[dict[str, object]]:
    """Compute processes on `gpu` that are not ours: not this process, not `exclude`, and not a cudaforge
    worker or spare of this user (another session's, say); each with pid, command and memory (MiB)."""
    skip = {os.getpid(), *exclude}
    others = []
    for row in _compute_apps(gpu):
        pid = int(row["pid"])  # type: ignore[call-overload]
        if pid in skip or is_cudaforge_process(pid):
            continue
        others.append({"pid": pid, "command": process_command(pid) or str(row["name"]), "memory_mib": row["memory_mib"]})
    return others
