"""bench/timing_fidelity.py's summary and table (pure functions; the bench itself runs on the GPU): a run whose
candidate timed slow is reported with what CUPTI's busy time and the host clock said of it, and how many of its
timed calls the GPU may have waited for the host in."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import timing_fidelity  # noqa: E402


def _run(cand_us: float, busy_us: float, ref_us: float = 70.3, late: float = 0.0, cpu_s: float = 0.2,
         preempted: int = 3) -> dict:
    return {"outcome": "ok", "speedup": ref_us / cand_us, "ref_us": ref_us, "cand_us": cand_us,
            "ref_busy_us": 68.0, "cand_busy_us": busy_us, "ref_host_us": 80.0, "cand_host_us": cand_us + 9,
            "measurements": 1, "late_launches": {"candidate": late, "reference": 0.0}, "findings": [], "wall_s": 3.0,
            "launch_cover_us": {"candidate": 180.0 if late else 0.0, "reference": 0.0},
            "launch_cover_total_ms": {"candidate": 61.2 if late else 0.0, "reference": 0.0},
            "host_load": {"started_at": 1000.0, "wall_s": 0.25, "cpu_s": cpu_s, "involuntary_switches": preempted,
                          "voluntary_switches": 40, "runnable": 9, "system_s": 0.004, "device_maps": 0,
                          "queue_us": {"candidate": 31.5, "reference": 22.25}, "steal_s": 0.0, "cpu": 5,
                          "iteration_us": {"candidate": 150.0, "reference": 101.0}}, "worker": "forked"}


def test_a_missed_spread_names_the_slowest_runs_events_busy_and_host_times() -> None:
    engine = {"gelu": [_run(110.7, 71.5, late=0.93, cpu_s=0.1, preempted=210), _run(71.9, 71.0),
                       *[_run(72.1, 71.0) for _ in range(3)]],
              "relu": [_run(60.0, 58.0) for _ in range(5)]}
    bench = {"gelu": {"ref_us": 70.0, "cand_us": 74.0, "speedup": 70.0 / 74.0},
             "relu": {"ref_us": 57.0, "cand_us": 60.0, "speedup": 57.0 / 60.0}}
    rows = {r["task"]: r for r in timing_fidelity.summarize(engine, bench)}
    gelu = rows["gelu"]
    assert gelu["spread_gated"] and gelu["spread_ok"] is False and rows["relu"]["spread_ok"] is True
    assert gelu["slowest_run"]["cand_us"] == 110.7 and gelu["slowest_run"]["cand_busy_us"] == 71.5
    text = timing_fidelity.table(list(rows.values()))
    assert ("gelu, slowest run: candidate events 110.7 µs, CUPTI busy 71.5 µs, host-synchronized 119.7 µs; "
            "reference events 70.3 µs, busy 68.0 µs; windows measured 1; "
            "calls launched late: candidate 93%, reference 0%; worker forked") in text
    # what the timing thread's host did in the slowest window, against the fastest run's
    assert ("host in the slowest run's window: timing thread on a CPU 40% of the 250 ms window, 210 preemptions, "
            "40 waits, 9 threads runnable at its end, 4 ms in the kernel, 0 allocator device maps, 0 ms stolen by the "
            "hypervisor, on CPU 5; host µs from flush to end event queued: candidate 31.5, reference 22.2; per "
            "iteration: candidate 150.0, reference 101.0") in text
    assert ("host in the fastest run's window: timing thread on a CPU 80% of the 250 ms window, 3 preemptions, "
            "40 waits, 9 threads runnable at its end, 4 ms in the kernel, 0 allocator device maps, 0 ms stolen by "
            "the hypervisor, on CPU 5; host µs from flush to end event queued: candidate 31.5, reference 22.2; per "
            "iteration: candidate 150.0, reference 101.0; calls launched late candidate 0%, reference 0%; worker "
            "forked") in text
    assert "relu, slowest run" not in text  # only a missed spread gets the line
    # each task's late share and launch cover in its slowest and fastest runs (timing.LaunchCover)
    assert ("| gelu | candidate 93%, reference 0% | candidate 180.0 / 61.2, reference 0.0 / 0.0 | "
            "candidate 0%, reference 0% | candidate 0.0 / 0.0, reference 0.0 / 0.0 |") in text
    # gelu misses its spread, relu its agreement (its reference here 70.3 µs against do_bench's 57)
    assert timing_fidelity.verdict(list(rows.values())) == "0 of 2 ok, missed: gelu, relu"
    assert timing_fidelity.verdict([{"task": "short", "agree_ok": True, "spread_gated": False, "spread_ok": False},
                                    {"task": "error", "error": "no do_bench"}]) == "1 of 2 ok, missed: error"


def test_how_each_worker_started_is_read_from_its_phases_and_late_runs_are_counted_by_it() -> None:
    assert timing_fidelity.worker_kind({"spare_fork": 0.01, "spare_context": 0.5}) == "forked"
    assert timing_fidelity.worker_kind({"spare_python_start": 0.08}) == "exec'd"
    assert timing_fidelity.worker_kind({"start": 0.01}) == "direct"
    forked_late = {**_run(110.7, 71.5, late=0.93), "worker": "forked"}
    exec_ok = {**_run(72.0, 71.0), "worker": "exec'd"}
    failed = {**_run(72.0, 71.0), "outcome": "runtime_error", "worker": "exec'd"}
    engine = {"gelu": [forked_late, _run(72.1, 71.0), exec_ok, failed]}
    assert timing_fidelity.late_by_worker(engine) == {"forked": (1, 2), "exec'd": (0, 1)}
