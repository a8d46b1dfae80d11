"""One file lock per GPU, so evaluations, timings and profiles of different sessions never overlap."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path


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


def other_gpu_processes(gpu: int, exclude: Iterable[int] = ()) -> list[int]:
    """PIDs of compute processes on `gpu` other than ours and `exclude` (empty when nvidia-smi is missing)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, "--query-compute-apps=pid", "--format=csv,noheader", "-i", str(gpu)],
                             capture_output=True, text=True, timeout=5, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    pids = []
    for line in out.splitlines():
        with contextlib.suppress(ValueError):
            pids.append(int(line.strip()))
    skip = {os.getpid(), *exclude}
    return [p for p in pids if p not in skip]
