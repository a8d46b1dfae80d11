"""The timing core (engine/worker/cpu_share.py): workers run on the CPUs less one physical core, and the worker
that holds the GPU alone moves its timing thread onto that core for the window. The plan from a topology, and
the affinities themselves in a real process taking real write and read holds (engine/gpu/rwlock.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cudaforge.engine.worker import cpu_share


def test_cpu_lists_read_as_the_kernel_writes_them() -> None:
    assert cpu_share.parse_cpu_list("3,11\n") == {3, 11}
    assert cpu_share.parse_cpu_list("0-3,8-11") == {0, 1, 2, 3, 8, 9, 10, 11}
    assert cpu_share.parse_cpu_list("5") == {5}


def test_the_highest_cpus_physical_core_is_set_apart() -> None:
    def pairs(cpu: int) -> frozenset[int]:  # 8 cores, 2 hyperthreads each: cpu i and i + 8
        return frozenset({cpu % 8, cpu % 8 + 8})

    plan = cpu_share.plan_for(range(16), pairs)
    assert plan is not None and plan.timing == {7, 15} and plan.shared == set(range(16)) - {7, 15}
    no_smt = cpu_share.plan_for(range(8), lambda c: frozenset({c}))
    assert no_smt is not None and no_smt.timing == {7} and len(no_smt.shared) == 7
    # a sibling outside the allowed CPUs (a cpuset) is not ours to set apart
    assert cpu_share.plan_for([0, 1, 2, 3, 4, 15], pairs).timing == {15}
    assert cpu_share.plan_for(range(4), pairs) is None  # too few CPUs: nothing set apart
    assert cpu_share.plan_for(range(2)) is None


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux affinities and 2 CPUs")
def test_a_worker_times_on_the_set_apart_core_and_side_by_side_work_does_not(tmp_path: Path) -> None:
    """A real process: its threads (one started before the plan, one after) on the shared CPUs; a write hold
    moves only the thread that took it; a read hold and the end of the window move it back."""
    script = textwrap.dedent(f"""
        import json, os, threading
        from cudaforge.engine.worker import cpu_share, gpu_share
        cpu_share.MIN_CPUS = 2  # this machine may have 2 CPUs: set one apart anyway
        stop = threading.Event()
        before = threading.Thread(target=stop.wait); before.start()
        plan = cpu_share.start_worker()
        after = threading.Thread(target=stop.wait); after.start()
        lock = {str(tmp_path / "gpu0.lock")!r}
        seen = {{"timing": sorted(plan.timing), "shared": sorted(plan.shared),
                 "started": sorted(os.sched_getaffinity(0)),
                 "thread_before": sorted(os.sched_getaffinity(before.native_id)),
                 "thread_after": sorted(os.sched_getaffinity(after.native_id))}}
        gpu_share.read(lock)
        seen["reading"] = sorted(os.sched_getaffinity(0))
        gpu_share.write(lock)
        seen["window"] = sorted(os.sched_getaffinity(0))
        seen["others_in_window"] = sorted(os.sched_getaffinity(after.native_id))
        gpu_share.read(lock)
        seen["after_window"] = sorted(os.sched_getaffinity(0))
        gpu_share.write(lock)
        gpu_share.release_all()
        seen["released"] = sorted(os.sched_getaffinity(0))
        stop.set()
        print(json.dumps(seen))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "CUDAFORGE_TIMING_CORE": ""})
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    timing, shared = seen["timing"], seen["shared"]
    assert timing and shared and not set(timing) & set(shared)
    assert seen["started"] == seen["thread_before"] == seen["thread_after"] == shared
    assert seen["reading"] == shared and seen["window"] == timing and seen["others_in_window"] == shared
    assert seen["after_window"] == shared and seen["released"] == shared


def test_it_can_be_turned_off() -> None:
    script = ("import os\nfrom cudaforge.engine.worker import cpu_share\ncpu_share.MIN_CPUS = 1\n"
              "before = os.sched_getaffinity(0)\nassert cpu_share.start_worker() is None\n"
              "assert os.sched_getaffinity(0) == before\ncpu_share.enter_window()\n"
              "assert os.sched_getaffinity(0) == before\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "CUDAFORGE_TIMING_CORE": "off"})
    assert out.returncode == 0, out.stderr
