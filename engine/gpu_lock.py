"""One file lock per GPU, so evaluations, timings and profiles of different sessions never overlap."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path


def gpu_lock_path(cache_dir: Path, gpu: int) -> Path:
    """The lock file shared by every evaluation, timing and profile on `gpu`."""
    lock_dir = cache_dir / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
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
