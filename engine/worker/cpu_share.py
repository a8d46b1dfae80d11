"""The timing core: while a worker holds the GPU alone, its timing thread runs on a CPU core that no other
worker of ours is allowed on.

A timed window's short calls are only as fast as the host that queues them: the flush before each call
covers the host's launch path (tens of µs), and a timing thread that loses its core to another process, or
shares it with a busy hyperthread, launches late, and the GPU waits inside the timed pair (Timer.late_launches;
with 8 evaluations in flight, session 18's H200 fidelity run had 94-99 % of the slowest gelu and layernorm
runs' calls launched late, their medians 44-66 % over the others'). So every worker starts on the machine's
CPUs less one physical core (the highest-numbered allowed CPU and its hyperthread siblings), builds and
intra-op threads included (they inherit it), and the one worker that holds the write hold moves its timing
thread onto that core for the window (gpu_share.write), and back when it lets the GPU go. Only one of our
processes holds a write hold at a time, so the core is its own. Processes that are not ours may still run
there; HostLoad's preemptions say when they did.

Off where fewer than MIN_CPUS CPUs are allowed (a core less would cost the side-by-side work too much), or
with CUDAFORGE_TIMING_CORE=off.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

ENV = "CUDAFORGE_TIMING_CORE"
MIN_CPUS = 6  # allowed CPUs below which no core is set apart
_TOPOLOGY = Path("/sys/devices/system/cpu")


@dataclass(frozen=True)
class CpuPlan:
    """The CPUs of the timing core (one physical core's hyperthreads) and those every worker runs on."""

    timing: frozenset[int]
    shared: frozenset[int]


def parse_cpu_list(text: str) -> frozenset[int]:
    """A kernel CPU list ("3,11", "2-3", "0-3,8-11") as a set."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(cpus)


def siblings(cpu: int) -> frozenset[int]:
    """`cpu`'s hyperthread siblings, itself included (itself alone where the topology cannot be read)."""
    try:
        return parse_cpu_list((_TOPOLOGY / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text()) | {cpu}
    except (OSError, ValueError):
        return frozenset({cpu})


def plan_for(allowed: Iterable[int], siblings_of: Callable[[int], frozenset[int]] = siblings) -> CpuPlan | None:
    """Set apart the highest-numbered allowed CPU's physical core; None where too few CPUs are allowed."""
    cpus = frozenset(allowed)
    if len(cpus) < MIN_CPUS:
        return None
    timing = siblings_of(max(cpus)) & cpus
    shared = cpus - timing
    return CpuPlan(timing=timing, shared=shared) if len(shared) >= MIN_CPUS - 2 else None


_PLAN: list[CpuPlan | None] = [None]


def _set_threads(cpus: frozenset[int], thread_ids: Iterable[int]) -> None:
    for tid in thread_ids:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(tid, cpus)


def start_worker() -> CpuPlan | None:
    """At a worker's start (before its builds and thread pools): every thread of it onto the shared CPUs.
    Returns the plan in force (None: no core set apart)."""
    if os.environ.get(ENV, "").lower() in ("off", "0", "false") or not hasattr(os, "sched_setaffinity"):
        return None
    try:
        plan = plan_for(os.sched_getaffinity(0))
    except OSError:
        return None
    if plan is None:
        return None
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    _set_threads(plan.shared, tids)
    _PLAN[0] = plan
    return plan


def plan() -> CpuPlan | None:
    return _PLAN[0]


def enter_window() -> None:
    """The calling thread (the one that times) onto the timing core: it holds the GPU alone now."""
    if _PLAN[0] is not None:
        _set_threads(_PLAN[0].timing, [0])


def leave_window() -> None:
    """The calling thread back among the shared CPUs: the window is over."""
    if _PLAN[0] is not None:
        _set_threads(_PLAN[0].shared, [0])
