"""The suite's guard against processes that outlive their test module (tests/leftover_processes.py): an
orphan of this run is found, named and killed; this run's live children and other runs' processes are not."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

import leftover_processes
from conftest import RUN_TOKEN


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def test_an_orphan_of_this_run_is_found_and_killed_and_a_live_child_is_not() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    # the shell exits at once: its sleeping child is re-parented away from pytest, as a killed app's workers are
    out = subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True, check=True)
    orphan = int(out.stdout)
    other = subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True,
                           check=True, env={**os.environ, leftover_processes.RUN_VAR: "another-run"})
    foreign = int(other.stdout)
    try:
        found = {p.pid: p.command for p in leftover_processes.find(RUN_TOKEN)}
        assert found.get(orphan) == "sleep 60"
        assert child.pid not in found and foreign not in found and os.getpid() not in found
        started = time.monotonic()
        killed = leftover_processes.reap(RUN_TOKEN)
        assert orphan in {p.pid for p in killed}
        assert time.monotonic() - started >= leftover_processes.GRACE_S * 0.9  # it had its chance to end alone
        deadline = time.monotonic() + 5
        while _alive(orphan) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(orphan) and _alive(foreign) and child.poll() is None
    finally:
        child.kill()
        child.wait()
        for pid in (orphan, foreign):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)


def test_an_orphan_that_ends_within_the_grace_is_not_reported() -> None:
    out = subprocess.run(["sh", "-c", "sleep 1 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True, check=True)
    assert int(out.stdout) in {p.pid for p in leftover_processes.find(RUN_TOKEN)}
    assert leftover_processes.reap(RUN_TOKEN) == []


def test_a_sibling_pytest_process_is_not_a_leftover() -> None:
    """pytest-xdist's workers are siblings that inherit their controller's environment: a process that
    inherited the token this process inherited (not one it made) is another run's, never killed here."""
    inherited = os.environ[leftover_processes.RUN_VAR]
    try:
        mine = leftover_processes.mark_this_run()
        assert mine != inherited
        sibling = subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True,
                                 check=True, env={**os.environ, leftover_processes.RUN_VAR: inherited})
        pid = int(sibling.stdout)
        try:
            assert pid not in {p.pid for p in leftover_processes.find(mine)}
        finally:
            os.kill(pid, 9)
    finally:
        os.environ[leftover_processes.RUN_VAR] = inherited
