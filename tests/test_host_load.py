"""What a timed window's host did (engine/worker/timing.py HostLoad, bench/proc_activity.py): a thread that
computes gets its CPU time counted against the wall, one that sleeps does not, and another process that
burns CPU during an interval is named with its CPU seconds there. Real threads, real processes, /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cudaforge.engine.worker import timing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import proc_activity  # noqa: E402

linux_only = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads /proc")


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_a_computing_thread_is_on_a_cpu_for_most_of_its_window_and_a_sleeping_one_is_not() -> None:
    probe = timing.HostLoadProbe()
    probe.start()
    _spin(0.3)
    busy = probe.stop()
    probe.start()
    time.sleep(0.3)
    idle = probe.stop()
    assert busy is not None and idle is not None
    assert busy.wall_s >= 0.3 and idle.wall_s >= 0.3
    assert busy.cpu_s <= busy.wall_s * 1.01
    # on a CPU all along, unless other threads took the core (a busy 2-core CI machine): then it says so
    assert busy.cpu_s > 0.9 * busy.wall_s or busy.involuntary_switches > 0, busy
    assert idle.cpu_s < 0.1 * idle.wall_s
    assert idle.voluntary_switches >= 1  # a sleep is a wait
    assert abs(busy.started_at - time.time()) < 5.0
    setting = busy.as_setting()
    assert set(setting) == {"started_at", "wall_s", "cpu_s", "involuntary_switches", "voluntary_switches", "runnable",
                            "system_s", "device_maps", "queue_us", "iteration_us", "steal_s", "cpu"}
    assert busy.device_maps == -1 and 0 <= busy.system_s <= busy.cpu_s + 0.02  # no allocator counted here
    assert probe.stop() is None  # nothing started: nothing to say


@linux_only
def test_the_machine_and_the_threads_cpu_are_read_from_proc() -> None:
    runnable, steal = timing._machine()
    assert runnable >= 1 and steal >= 0.0  # this thread runs
    assert 0 <= timing._processor() < (os.cpu_count() or 1) * 4


def test_the_timer_keeps_the_last_windows_host_load() -> None:
    import torch

    timer = timing.Timer(torch.device("cpu"), False, 0)
    samples = timer.event_times({"a": lambda: _spin(0.002), "b": lambda: _spin(0.001)}, warmup=1, trials=20)
    load = timer.host_load
    assert len(samples["a"]) == 20 and load is not None
    timed = (sum(samples["a"]) + sum(samples["b"])) / 1e3
    assert load.wall_s >= timed and 0 < load.cpu_s <= load.wall_s * 1.01
    assert load.cpu_s > 0.9 * timed or load.involuntary_switches > 0, load
    assert load.device_maps == -1  # the CPU device: no caching allocator of device memory
    assert load.queue_us == {}  # no flush and no events on the CPU device
    # each side's whole iteration, at least its own call (2 ms and 1 ms of spinning)
    assert load.iteration_us["a"] >= 2000 and load.iteration_us["b"] >= 1000, load


@linux_only
def test_a_process_burning_cpu_in_an_interval_is_named_with_its_cpu_seconds() -> None:
    burn = "import time\nend = time.perf_counter() + 0.8\nwhile time.perf_counter() < end: pass\n"
    with proc_activity.ProcessActivity(interval_s=0.05) as activity:
        time.sleep(0.2)
        t0 = time.time()
        ended = subprocess.Popen([sys.executable, "-c", burn])  # ends within the interval
        lives = subprocess.Popen([sys.executable, "-c", burn + "time.sleep(1.0)\n"])  # still there after it
        ended.wait(timeout=30)
        time.sleep(0.3)
        t1 = time.time()
        lives.wait(timeout=30)
    cores, top = activity.between(t0, t1)
    by_pid = {u.pid: u for u in top}
    for child in (ended, lives):
        assert child.pid in by_pid, top
        assert by_pid[child.pid].cpu_s >= 0.2  # 0.8 s of spinning, on a machine that may be busy
        assert "python" in by_pid[child.pid].label.lower()
    assert cores >= 0.3
    assert activity.between(t1 + 100, t1 + 101) == (0.0, [])  # no samples after it: nothing to say
