"""The temp folders evaluations work in (`cudaforge-<label>-*`: a job's, a spare's, a zygote's), and the
removal of those whose app is gone.

An app removes its folders as it goes and at exit, and a supervisor or zygote whose app died removes its
own; but a process killed with SIGKILL (`kill -9`, Ray ending an actor together with its children) runs
no clean-up at all, and its folders stayed in the temp folder for good (about 120 in a day of this
project's test runs). So each folder names its owner (pid and start time, `owner`), and the first folder
an app makes starts a sweep, off the caller's thread, of the folders whose owner no longer runs."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path

from cudaforge.engine.gpu.lock import process_alive, process_start

PREFIX = "cudaforge-"
OWNER_FILE = "owner"  # "<pid> <start time>": only a folder with one is ever removed (not the lock folder)
_SWEPT: list[bool] = []
_SWEEP_LOCK = threading.Lock()


def make_workdir(label: str) -> Path:
    """A new folder `cudaforge-<label>-*` in the temp folder, owned by this process."""
    workdir = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{label}-"))
    (workdir / OWNER_FILE).write_text(_owner())
    _sweep_once()
    return workdir


def _owner() -> str:
    """This process's owner line (read from /proc once per process; a fork has its own pid, so its own line)."""
    pid = os.getpid()
    if _OWNER.get("pid") != pid:
        _OWNER.update(pid=pid, line=f"{pid} {process_start(pid)}\n")
    return str(_OWNER["line"])


_OWNER: dict[str, object] = {}


def remove_job_folder_of_dead_app(sandbox_dir: str) -> None:
    """Remove a job's folder (the sandbox folder's parent, `cudaforge-<mode>-*`) once its app died: what an
    exec'd supervisor and a zygote do for the jobs they ran, without waiting for the next app's sweep."""
    job = Path(sandbox_dir).parent
    if job.name.startswith(PREFIX) and Path(sandbox_dir).name == "sandbox":
        shutil.rmtree(job, ignore_errors=True)


def finish(workdir: Path, keep: bool) -> None:
    """A job is over: remove its folder, or (`--keep`) leave it for the person to read, no longer ours to
    sweep (its owner file goes, so the next app's sweep never takes what was kept on purpose)."""
    if keep:
        (workdir / OWNER_FILE).unlink(missing_ok=True)
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def _sweep_once() -> None:
    with _SWEEP_LOCK:
        if _SWEPT:
            return
        _SWEPT.append(True)
    threading.Thread(target=sweep_orphaned, name="cudaforge-workdir-sweep", daemon=True).start()


def orphaned(folder: Path) -> bool:
    """Whether `folder` is one of ours whose owner no longer runs (a folder without an owner file, from before
    there was one or made this instant, is never taken)."""
    try:
        pid_text, _, start = (folder / OWNER_FILE).read_text().strip().partition(" ")
        pid = int(pid_text)
    except (OSError, ValueError):
        return False
    return not process_alive(pid, start)


def sweep_orphaned(root: Path | None = None) -> list[Path]:
    """Remove our folders in `root` (the temp folder) whose owner is gone; the folders removed."""
    root = Path(root or tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for folder in entries:
        if not folder.name.startswith(PREFIX):
            continue
        if folder.is_dir() and not folder.is_symlink() and orphaned(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed
