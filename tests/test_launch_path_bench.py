"""bench/launch_path.py off the GPU: fresh processes, one after another, pin their timing thread to each CPU,
time a window with the worker's own timer and a busy neighbour per pair; the summary names per process and
per CPU what they measured (the GPU part, the launch path itself, runs in gpu_check's `launch-path` step)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
try:
    import launch_path
finally:
    sys.path.pop(0)

linux_only = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")


def test_cpu_lists_read_as_ranges() -> None:
    assert launch_path.parse_cpus("0-3,8") == [0, 1, 2, 3, 8]
    assert launch_path.parse_cpus("5") == [5]
    assert launch_path.parse_cpus("") == sorted(os.sched_getaffinity(0))


@linux_only
def test_processes_measure_every_cpu_and_the_pairs_on_the_host_clock(tmp_path: Path) -> None:
    """The bench in a process of its own, as gpu_check runs it: its --fork-ab forks that process, which must not
    be this one (a test process may have threads, whose locks a fork copies held)."""
    cpus = sorted(os.sched_getaffinity(0))[:2]
    out = tmp_path / "lp.json"
    args = ["--device", "cpu", "--processes", "4", "--cpus", ",".join(map(str, cpus)), "--calls", "20",
            "--alloc-ab", "--fork-ab", "--json", str(out)]
    if len(cpus) == 2:
        args += ["--pairs", str(cpus[0])]
    done = subprocess.run([sys.executable, str(REPO / "bench" / "launch_path.py"), *args], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    processes = data["processes"]
    assert len({p["pid"] for p in processes} | {os.getpid()}) == 5  # a process of its own each
    assert [p["alloc_conf"] for p in processes] == list(launch_path.ALLOC_CONFS) * 2  # alternated
    assert [p["forked"] for p in processes] == [False, False, True, True]  # each setting fresh, then forked
    for p in processes:
        assert [r["cpu"] for r in p["rows"]] == cpus
        for r in p["rows"]:
            assert r["py_loop_us"] > 0
            assert set(r["event_us"]) == {"reference", "candidate"} and r["event_us"]["reference"] > 0
            assert r["queue_us"] == {} and r["late"] == {}  # no flush and no events off the GPU
            assert 0 < r["on_cpu"] <= 1.05
    pairs = processes[0]["pairs"]
    assert len(pairs) == len(cpus) - 1 and all(r["busy_cpu"] != r["cpu"] for r in pairs)
    assert all(p["pairs"] == [] for p in processes[1:])  # the busy-neighbour test runs in the first process only
    printed = done.stdout
    assert "| 0 (pid " in printed and ", fresh) |" in printed and ", forked) |" in printed and "(none)" in printed
    assert "spread (max/min of the medians): process path -, process loop " in printed
    for cpu in cpus:
        assert f"\n| {cpu} | " in printed


def test_a_bad_cpu_list_is_one_line_and_exit_2(capsys) -> None:
    assert launch_path.main(["--device", "cpu", "--cpus", "zero"]) == 2
    assert "--cpus/--pairs must look like 0-3,8" in capsys.readouterr().err


def test_it_refuses_to_fork_a_process_that_runs_threads() -> None:
    import threading

    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        with pytest.raises(RuntimeError, match="runs threads"):
            launch_path.forked_child("cpu", [0], 5, [], "")
    finally:
        stop.set()
        other.join()
