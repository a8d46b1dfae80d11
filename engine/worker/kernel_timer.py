"""The CUPTI kernel-time timer: what the device was busy with during each host-timed call.

The CUDA events time the current stream; `Timer.host_times` times the whole device from the host
(`hidden_async_work`). This third clock reads CUPTI's activity records (through the PyTorch profiler, which
is Kineto over CUPTI) of every kernel, copy and memset on every stream, during the same synchronized
host-timed calls: never inside the event window, whose rules stay as they are. A call's busy time is
the union of its activities' intervals, so honest overlap between streams is not counted twice.

The L2 flush before each call runs on a stream of our own (the marker stream) and is synchronized
before the call starts, so on the device timeline every call's work lies between two of our flush
kernels: the flushes split the timeline into calls and are left out. CUPTI allows one subscriber: this
runs only in evaluate mode, which ncu never wraps (profile mode has no timing).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from cudaforge.engine import observe

DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")  # Kineto's activity types of device work


@dataclass(frozen=True)
class Activity:
    """One CUPTI activity record: device start and end (ns), the CUPTI stream id, the name."""

    start_ns: int
    end_ns: int
    stream: int
    name: str


def union_ms(intervals: Iterable[tuple[int, int]]) -> float:
    """Length of the union of [start, end) intervals in ns, as ms (overlapping work counted once)."""
    total = 0
    end_so_far: int | None = None
    start_so_far = 0
    for start, end in sorted(intervals):
        if end_so_far is None or start > end_so_far:
            if end_so_far is not None:
                total += end_so_far - start_so_far
            start_so_far, end_so_far = start, end
        else:
            end_so_far = max(end_so_far, end)
    if end_so_far is not None:
        total += end_so_far - start_so_far
    return total / 1e6


def busy_per_call(activities: list[Activity], order: list[str]) -> tuple[dict[str, list[float]], str]:
    """Split the device timeline at our flush kernels: the first activity is the marker flush issued
    before the first call, its stream is the marker stream, and one more flush precedes every call.
    Returns (name -> busy ms per call, "") or ({}, why the records could not be read)."""
    if not activities:
        return {}, "no CUPTI activity records"
    timeline = sorted(activities, key=lambda a: (a.start_ns, a.end_ns))
    marker = timeline[0].stream
    flushes = sum(1 for a in timeline if a.stream == marker)
    if flushes != len(order) + 1:
        return {}, f"{flushes} activities on the flush stream for {len(order)} calls: the calls cannot be told apart"
    per_call: list[list[tuple[int, int]]] = [[] for _ in order]
    index = -2  # the marker makes it -1 (nothing to record), the first call's flush 0
    for a in timeline:
        if a.stream == marker:
            index += 1
        elif index >= 0:
            per_call[index].append((a.start_ns, a.end_ns))
    busy: dict[str, list[float]] = {n: [] for n in dict.fromkeys(order)}
    for name, intervals in zip(order, per_call, strict=True):
        busy[name].append(union_ms(intervals))
    return busy, ""


def activities_of(prof: Any) -> list[Activity]:
    """The device activities (kernels, copies, memsets) of a finished profiler session (observe.device_profile), read from its
    raw Kineto events (key_averages and events() aggregate or drop the time ranges)."""
    results = getattr(prof, "kineto_results", None)
    if results is None:
        return []
    out = []
    for e in results.events():
        if "CUDA" not in str(e.device_type()):
            continue
        kind = e.activity_type() if hasattr(e, "activity_type") else None
        if kind is not None and kind not in DEVICE_WORK:
            continue  # gpu_user_annotation ranges, runtime calls
        if kind is None and getattr(e, "is_user_annotation", lambda: False)():
            continue
        # No filter by name: a candidate kernel named like ours is still the candidate's work.
        out.append(Activity(int(e.start_ns()), int(e.end_ns()), int(e.device_resource_id()), e.name()))
    return out


class KernelTimer:
    """Collects CUPTI records around `Timer.host_times` (given `flush` as its flush), then `busy()`."""

    def __init__(self, timer: Any) -> None:
        import torch

        self.timer = timer
        self.stream = torch.cuda.Stream(device=timer.device)
        # With the L2 flush off, a one-element write still marks each call on the marker stream.
        self._mark = torch.zeros(1, device=timer.device) if timer.flush_buffer is None else None
        self._stack = contextlib.ExitStack()
        self._prof: Any = None
        self.note = ""

    def flush(self) -> None:
        """The timer's L2 flush, on the marker stream (host_times synchronizes before the call)."""
        import torch

        with torch.cuda.stream(self.stream):
            if self._mark is not None:
                self._mark.zero_()
            else:
                self.timer.flush()

    def start(self) -> None:
        self.timer._sync()
        self._prof = self._stack.enter_context(observe.device_profile())
        self.flush()  # the marker: the first record on the marker stream
        self.timer._sync()

    def stop(self) -> None:
        self.timer._sync()
        self._stack.close()

    def busy(self, order: list[str]) -> dict[str, list[float]]:
        """name -> busy ms per host-timed call, in `order` (the calls host_times made); {} with `note` set
        when the records could not be read."""
        try:
            busy, self.note = busy_per_call(activities_of(self._prof), order)
        except Exception as exc:  # a torch whose profiler results differ: the timer is absent, and says why
            busy, self.note = {}, f"CUPTI records unreadable: {type(exc).__name__}: {str(exc)[:120]}"
        return busy


R = TypeVar("R")


def with_kernel_timer(timer: Any, run: Callable[[Callable[[], None] | None], R],
                      done: Callable[[], None] = lambda: None,
                      part: Callable[[str], Any] = observe.untimed_part
                      ) -> tuple[R, dict[str, list[float]], str]:
    """`run(flush)` (the host-timed calls, given the flush to use) with CUPTI collecting: (its result,
    name -> busy ms per call, "" or why the timer is absent). `done()` is called once the device work is
    over, before the session stops and its records are read (the caller lets its exclusive hold go there:
    both are host work); `part(name)` times the steps (the worker's sub-phases). Only the candidate's and
    reference's own exceptions leave here; a profiler that cannot start or be read leaves the timer absent."""
    if not timer.cuda:
        out = run(None)
        done()
        return out, {}, "absent: the CPU device launches no kernels"
    kernel_timer = None
    try:
        with part("cupti_start"):
            kernel_timer = KernelTimer(timer)
            kernel_timer.start()
    except Exception as exc:
        if kernel_timer is not None:
            with contextlib.suppress(Exception):
                kernel_timer.stop()  # a profiler half started is closed before the calls run
        out = run(None)
        done()
        return out, {}, f"absent: the profiler did not start: {type(exc).__name__}: {str(exc)[:120]}"
    try:
        with part("host_calls"):
            out = run(kernel_timer.flush)
        # The device work is over (host_times synchronized after its last call): the exclusive hold goes
        # before CUPTI stops, since ending the session (Kineto collecting its records) is host work; it was
        # 6.6 s of the H200 sweep's 86.9 s held alone (session 15). The worker holds no GPU lock meanwhile
        # (done() releases it): under a read hold it held waiting windows back instead.
        done()
    finally:
        with part("cupti_stop"), contextlib.suppress(Exception):
            kernel_timer.stop()
    with part("cupti_read"):
        busy = kernel_timer.busy(list(timer.host_order))
    return out, busy, f"absent: {kernel_timer.note}" if kernel_timer.note else ""
