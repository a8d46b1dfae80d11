"""Temp folders of apps that were killed (engine/evaluation/workdirs.py): an app killed with SIGKILL runs no
clean-up, so the next app removes the folders whose owner no longer runs, and nothing else."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cudaforge.engine.evaluation import workdirs


def test_folders_of_a_killed_app_are_swept_and_live_or_foreign_ones_are_not(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)  # re-read TMPDIR
    monkeypatch.setattr(workdirs, "_SWEPT", [True])  # this process's own background sweep would race the test's
    app = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom cudaforge.engine.evaluation.workdirs import make_workdir\n"
                               "print(make_workdir('evaluate'), make_workdir('zygote'), flush=True)\ntime.sleep(60)"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert app.stdout is not None
    killed_app = [Path(p) for p in app.stdout.readline().split()]
    ours = workdirs.make_workdir("spare")  # this process's: alive
    lock_folder = tmp_path / "cudaforge-locks-0"  # ours, with no owner file: never taken
    lock_folder.mkdir()
    other = tmp_path / "someone-else"
    other.mkdir()
    (other / "owner").write_text("999999 1\n")
    assert all(p.parent == tmp_path and p.is_dir() for p in [*killed_app, ours])
    assert workdirs.sweep_orphaned(tmp_path) == []  # the app still runs
    os.kill(app.pid, signal.SIGKILL)  # no clean-up runs
    app.wait()
    removed = workdirs.sweep_orphaned(tmp_path)
    assert sorted(removed) == sorted(killed_app)
    assert ours.is_dir() and lock_folder.is_dir() and other.is_dir()
    assert not any(p.exists() for p in killed_app)


def test_a_reused_pid_does_not_keep_a_dead_apps_folder(tmp_path: Path) -> None:
    """The owner file holds the pid and its start time: a later process with the same pid is not the owner."""
    folder = tmp_path / "cudaforge-evaluate-reused"
    folder.mkdir()
    (folder / "owner").write_text(f"{os.getpid()} 1\n")  # this pid, but started at another time
    assert workdirs.orphaned(folder)
    (folder / "owner").write_text(f"{os.getpid()} {workdirs.process_start(os.getpid())}\n")
    assert not workdirs.orphaned(folder)


def test_the_first_folder_an_app_makes_starts_the_sweep_off_its_thread(tmp_path: Path) -> None:
    stale = tmp_path / "cudaforge-spare-stale"
    stale.mkdir()
    (stale / "owner").write_text("999999 1\n")
    script = ("import time\nfrom cudaforge.engine.evaluation.workdirs import make_workdir\n"
              "t = time.monotonic(); make_workdir('evaluate'); print(time.monotonic() - t)\ntime.sleep(1.0)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "TMPDIR": str(tmp_path)}, check=True)
    assert float(out.stdout) < 0.5
    deadline = time.monotonic() + 5
    while stale.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not stale.exists()


@pytest.mark.parametrize("zygote_switch", ["0", "1"], ids=["exec-d", "zygote"])
def test_an_app_that_exits_right_after_its_evaluations_leaves_no_folder(tmp_path: Path, cpu_options,
                                                                       zygote_switch: str) -> None:
    """Evaluations whose workers are still exiting when the app ends (their reports taken) are killed at exit
    and their folders removed then, spares' and the zygote's included."""
    tasks = Path(__file__).parent / "core_tasks"
    script = f"""
import asyncio
from pathlib import Path
from cudaforge.engine.candidate import load_candidate
from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator
from cudaforge.engine.task import load_task

async def main():
    ev = Evaluator(EvalOptions(device="cpu", trials=2, cache_dir=Path({str(cpu_options.cache_dir)!r}), result_cache=False,
                               timing={{"warmup": 1, "trials": 3, "host_trials": 2, "l2_flush": False}}))
    ev.prewarm()
    for name in ("correct.py", "wrong.py"):
        r = await ev.evaluate(load_task({str(tasks / "task.py")!r}), load_candidate(Path({str(tasks)!r}) / name))
        print(name, r.outcome, flush=True)

asyncio.run(main())  # no aclose: what is still running goes at exit
"""
    env = {**os.environ, "TMPDIR": str(tmp_path), "CUDAFORGE_ZYGOTE": zygote_switch}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "correct.py ok" in out.stdout and "wrong.py wrong_result" in out.stdout, out.stdout
    deadline = time.monotonic() + 10  # a zygote's own folder goes once its spares have
    while time.monotonic() < deadline:
        left = [p.name for p in tmp_path.iterdir() if (p / workdirs.OWNER_FILE).exists()]
        if not left:
            break
        time.sleep(0.1)
    assert left == []


def test_a_folder_kept_on_request_is_never_swept(tmp_path: Path) -> None:
    """`cudaforge eval --keep` leaves the worker's folder for the person to read: it has no owner any more, so
    no later app's sweep takes it."""
    tasks = Path(__file__).parent / "core_tasks"
    env = {**os.environ, "TMPDIR": str(tmp_path), "CUDAFORGE_ZYGOTE": "0"}
    out = subprocess.run([sys.executable, "-m", "cudaforge.engine.cli", "eval", str(tasks / "task.py"),
                          str(tasks / "correct.py"), "--device", "cpu", "--keep"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("cudaforge-evaluate-")]
    assert len(kept) == 1 and (kept[0] / "result.json").is_file(), [p.name for p in tmp_path.iterdir()]
    assert not (kept[0] / workdirs.OWNER_FILE).exists()
    assert workdirs.sweep_orphaned(tmp_path) == [] and kept[0].is_dir()
