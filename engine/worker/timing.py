"""Timing, like triton.testing.do_bench: interleaved calls with an L2 flush before each, CUDA events on
the GPU (the host clock on the CPU), and the statistics of the samples.

The clocks are captured before any candidate code is imported (capture_clocks), so a candidate that
patches time.perf_counter or torch.cuda.Event later cannot falsify the numbers.
"""

from __future__ import annotations

import dataclasses
import math
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from cudaforge.engine.integrity.evidence import is_noisy
from cudaforge.engine.procstat import TICKS_PER_S, read_stat
from cudaforge.engine.results import TimingStats


def stats(samples_ms: list[float], method: str) -> TimingStats:
    s = sorted(samples_ms)
    q = statistics.quantiles(s, n=4) if len(s) >= 2 else [s[0], s[0], s[0]]
    return TimingStats(median_ms=statistics.median(s), iqr_ms=q[2] - q[0], min_ms=s[0], max_ms=s[-1],
                       mean_ms=statistics.fmean(s), trials=len(s), method=method)


def quartiles(samples: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(sorted(samples), n=4) if len(samples) >= 2 else [samples[0]] * 3
    return q[0], q[2]


REAL_CLOCKS: dict[str, Any] = {"perf_counter": time.perf_counter, "monotonic": time.monotonic}


def capture_clocks() -> None:
    """Keep references to the timing functions before the candidate is imported, so patching
    them later cannot falsify our numbers (it is still reported as harness_tampering)."""
    import torch

    REAL_CLOCKS["perf_counter"] = time.perf_counter
    REAL_CLOCKS["monotonic"] = time.monotonic
    REAL_CLOCKS["synchronize"] = torch.cuda.synchronize
    REAL_CLOCKS["event"] = torch.cuda.Event
    REAL_CLOCKS["spin"] = getattr(torch.cuda, "_sleep", None)  # the launch cover's spin kernel (LaunchCover)


def until_quiet(measure: Callable[[], dict[str, list[float]]], threshold: float, retries: int) \
        -> tuple[dict[str, list[float]], int]:
    """Measure, and measure again while the reference's or the candidate's spread (IQR / median) is over
    `threshold`, at most `retries` more times: (the first quiet measurement, else the last; how many were
    taken). A disturbed machine or card gives one noisy window more often than three."""
    measurements = 0
    while True:
        samples = measure()
        measurements += 1
        quiet = not is_noisy(stats(samples["reference"], ""), stats(samples["candidate"], ""), threshold)
        if quiet or measurements > retries:
            return samples, measurements


@dataclass(frozen=True)
class HostLoad:
    """What the timing thread's host did during one event window: whether the window's late launches
    (Timer.late_launches) came from the thread losing its core to other processes (involuntary switches,
    CPU time well under the wall) or from a thread that ran all along but ran slowly (CPU time near the
    wall), and then whether in the kernel (`system_s`: driver calls) and in allocator maps (`device_maps`).
    `runnable` is the machine's runnable threads at the window's end (/proc/stat, -1 where absent)."""

    started_at: float  # epoch seconds: lines the window up with other processes' activity
    wall_s: float
    cpu_s: float  # the timing thread's user + system time
    involuntary_switches: int  # the scheduler took the core away (another thread wanted it)
    voluntary_switches: int  # the thread waited (a synchronize, a lock)
    runnable: int
    system_s: float = 0.0  # of cpu_s, in the kernel (rusage: by scheduler ticks, a few ms)
    device_maps: int = -1  # the caching allocator's device allocations and frees (cudaMalloc/cuMemMap and
    # their undoing) in the window: each is a driver call on the launch path; -1 off CUDA
    # per callable, the median host time from the flush's launch to the end event's (CUDA): over the flush's
    # GPU time (tens of µs), the GPU waits for the call's launch inside the timed pair
    queue_us: dict[str, float] = dataclasses.field(default_factory=dict)
    # per callable, the median host time of its whole iteration (our hooks, the flush, the call, the events):
    # over the flush's and the call's GPU time together the host falls behind and the GPU idles between
    # calls, but the flush, started on an idle GPU, still covers the launch: lateness is queue_us's alone
    iteration_us: dict[str, float] = dataclasses.field(default_factory=dict)
    steal_s: float = 0.0  # all CPUs' time stolen by a hypervisor in the window (a virtual machine's host)
    cpu: int = -1  # the CPU the thread ran on at the window's end

    def as_setting(self) -> dict[str, Any]:
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in asdict(self).items()}


def _machine() -> tuple[int, float]:
    """(runnable threads, seconds stolen from all CPUs by the hypervisor so far) from /proc/stat; (-1, 0.0)
    where it cannot be read. Steal is time a virtual CPU wanted to run and its host ran something else:
    the guest's own clocks do not see it."""
    runnable, steal = -1, 0.0
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"cpu "):
                    fields = line.split()
                    steal = int(fields[8]) / TICKS_PER_S if len(fields) > 8 else 0.0
                elif line.startswith(b"procs_running"):
                    runnable = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return runnable, steal


def _processor() -> int:
    """The CPU this thread last ran on (/proc/thread-self/stat's field 39), -1 where unknown."""
    stat = read_stat("/proc/thread-self/stat")
    try:
        return stat.field(39) if stat is not None else -1
    except (ValueError, IndexError):
        return -1


_THREAD_USAGE = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)
_WALL = time.time  # the window's place in time only: no measurement is taken from this clock


def _device_maps() -> int:
    """The caching allocator's device allocation and free calls so far (this process, current device): the
    nested stats, whose two counters lie at the top (memory_stats would flatten every other one first)."""
    import torch

    stats = torch.cuda.memory.memory_stats_as_nested_dict()
    return int(stats.get("num_device_alloc", 0)) + int(stats.get("num_device_free", 0))


def _median_us(seconds: dict[str, list[float]]) -> dict[str, float]:
    return {n: round(statistics.median(v) * 1e6, 2) for n, v in seconds.items() if v}


class HostLoadProbe:
    """Reads the calling thread's clocks and rusage at a window's start and end (a few syscalls, outside the
    timed calls)."""

    def __init__(self, device_maps: Callable[[], int] | None = None) -> None:
        self._start: tuple[float, float, float, Any, int, float] | None = None
        self._maps = device_maps

    def start(self) -> None:
        maps = self._maps() if self._maps is not None else -1
        self._start = (_WALL(), time.perf_counter(), time.thread_time(), resource.getrusage(_THREAD_USAGE), maps,
                       _machine()[1])

    def stop(self, queue_us: dict[str, float] | None = None,
             iteration_us: dict[str, float] | None = None) -> HostLoad | None:
        """The window's HostLoad (None where start() was not called), with the timer's per-call host medians."""
        if self._start is None:
            return None
        at, t0, c0, r0, m0, steal0 = self._start
        # The thread's CPU clock, not rusage's times: those advance by scheduler ticks (ms), too coarse for a
        # window of tens of ms; rusage gives the switch counts.
        r1, c1, t1 = resource.getrusage(_THREAD_USAGE), time.thread_time(), time.perf_counter()
        maps = self._maps() - m0 if self._maps is not None else -1
        runnable, steal = _machine()
        self._start = None
        return HostLoad(started_at=at, wall_s=t1 - t0, cpu_s=c1 - c0, system_s=r1.ru_stime - r0.ru_stime,
                        device_maps=maps,
                        involuntary_switches=r1.ru_nivcsw - r0.ru_nivcsw,
                        voluntary_switches=r1.ru_nvcsw - r0.ru_nvcsw,
                        runnable=runnable, steal_s=round(steal - steal0, 4), cpu=_processor(),
                        queue_us=queue_us or {}, iteration_us=iteration_us or {})


class ThreadPin:
    """CPU device: torch's intra-op thread count, the same for both sides of every timed call (a hook,
    run before each call, outside the timed window)."""

    def __init__(self, threads: int) -> None:
        import torch

        self.threads = threads
        self._torch = torch
        torch.set_num_threads(threads)

    def before(self, name: str) -> None:
        if self._torch.get_num_threads() != self.threads:
            self._torch.set_num_threads(self.threads)

    def after(self, name: str, out: Any) -> None:
        pass


class HookChain:
    """Several timing hooks as one (Timer.event_times' `hooks`): each one's begin/before in order, after in
    reverse order, so the first hook's before runs first and its after last (it wraps the others)."""

    def __init__(self, *hooks: Any) -> None:
        self.hooks = hooks

    def begin(self, trials: int) -> None:
        for h in self.hooks:
            if hasattr(h, "begin"):
                h.begin(trials)

    def before(self, name: str) -> None:
        for h in self.hooks:
            h.before(name)

    def after(self, name: str, out: Any) -> None:
        for h in reversed(self.hooks):
            h.after(name, out)


# The flush writes at least what triton.testing.do_bench's does (a 256e6-byte buffer), whatever the L2: the
# flush kernel then also keeps the GPU busy while the host records the start event and launches the call,
# so a short kernel's events hold its host launch gap only where that gap outlasts the flush (H200: 2 x L2
# was 120 MB, about 30 us, and the nvrtc ReLU example's events came out 1.29-1.77x its CUPTI busy time).
MIN_FLUSH_BYTES = 256_000_000
MIN_TRIALS = 10  # timed calls of each callable however long it is (event_times' `max_time_ms`)


# The launch cover: a spin kernel queued after a timed call's flush while the host queues that call more slowly
# than it can (a loaded machine), so a slow host's launch stays out of the call's events (H200, 8 in flight,
# session 39: 70 µs kernels, host 100-160 µs from the flush to the end event, 75-97 % of calls late, event times
# up to 1.7x the CUPTI busy time, while one at a time they agreed with do_bench).
COVER_MARGIN = 1.25  # the cover outlasts this much of the host's expected delay
COVER_WINDOW = 8  # the recent timed calls whose queueing times give the expected one (their median)
MAX_COVER_US = 2000.0  # the longest cover
EVENT_QUEUE_US = 15.0  # the flush, the cover and two event records, beside the call's own launches
CALIBRATION_CYCLES = 200_000  # about 0.1 ms of spinning at the H200's clocks


class LaunchCover:
    """Per callable, how long the GPU spins after the flush before a timed call's start event: what a loaded
    host adds to the call's queueing (flush, start event, the call's launches, end event), so the GPU reaches
    the start event about when an unloaded host would have had the call queued.

    The events then hold what they hold on an idle machine, and what `triton.testing.do_bench` gives there:
    the call's device work, plus the part of its own host path (a Python prologue before its first launch) that
    outlasts the flush. The cover is the expected queueing time (the median of the last COVER_WINDOW calls, the
    warm-up's at first) less the least seen (the call's own cost, measured when the host was least loaded) and
    less the flush that runs first, never under 0 and at most MAX_COVER_US: a call that is host-bound by itself
    stays host-bound in its events.

    `load_from` names the callable whose queueing measures the host's load (the harness's reference): another
    callable's expected queueing is then at most its least times that one's slowdown (recent / least). Candidate
    code decides its own host time; with the cover taken from its own figures alone, a candidate that queued one
    call quickly and then spent host time before its launches (reading inputs on a side stream while the GPU
    spins) would have that time covered. Only GPU time outside the events goes to the cover: the L2 flush, the
    interleaving and the median do not change."""

    def __init__(self, warmup_host_us: dict[str, list[float]], flush_us: float, load_from: str | None = None) -> None:
        self.flush_us = flush_us
        self.load_from = load_from if load_from in warmup_host_us else None
        # no warm-up call: no least yet, so no cover until a timed call has shown the call's own cost
        self.least_us = {n: min(us) + EVENT_QUEUE_US if us else math.inf for n, us in warmup_host_us.items()}
        self.recent_us: dict[str, list[float]] = {
            n: [statistics.median(us) + EVENT_QUEUE_US] if us else [] for n, us in warmup_host_us.items()}
        self.largest_us: dict[str, float] = {n: 0.0 for n in warmup_host_us}  # the longest cover each side got
        self.total_us: dict[str, float] = {n: 0.0 for n in warmup_host_us}  # what it added to the window's wall

    def _expected_us(self, name: str) -> float | None:
        """`name`'s expected queueing now: its recent median, capped by the load callable's slowdown."""
        recent, least = self.recent_us[name], self.least_us[name]
        if not recent or math.isinf(least):
            return None
        expected = statistics.median(recent)
        source = self.load_from
        if source is not None and source != name:
            load_recent, load_least = self.recent_us[source], self.least_us[source]
            if not load_recent or math.isinf(load_least):
                return least  # no load measured yet: no cover
            expected = min(expected, least * max(statistics.median(load_recent) / load_least, 1.0))
        return expected

    def cover_us(self, name: str) -> float:
        """The spin before `name`'s next timed call, in µs (0: the host queues it as fast as it ever did, or the
        flush outlasts the delay).

        Asked for every call, also one queued while the GPU is still behind the host (a call of milliseconds):
        skipping those (session 41) lost the cover after a short call queued behind a spin, the GPU then reached
        the next start event with only that call ahead, and 31-40 % of a loaded host's short calls were late on an
        H100 (at most 15 % with the cover asked every time). What the spins add to the window is recorded."""
        expected = self._expected_us(name)
        if expected is None:
            return 0.0
        delay = expected - max(self.flush_us, self.least_us[name])
        us = min(max(COVER_MARGIN * delay, 0.0), MAX_COVER_US)
        self.largest_us[name] = max(self.largest_us[name], us)
        self.total_us[name] += us
        return us

    def observed(self, name: str, queued_us: float) -> None:
        """After a timed call: the host's time from the flush's launch to the end event's."""
        recent = self.recent_us[name]
        recent.append(queued_us)
        del recent[:-COVER_WINDOW]
        self.least_us[name] = min(self.least_us[name], queued_us)


class Timer:
    """Interleaved timing of several callables with an L2 flush before every call."""

    def __init__(self, device: Any, l2_flush: bool, l2_bytes: int, launch_cover: bool = True,
                 cover_load_from: str | None = None) -> None:
        import torch

        self.device = device
        self.cuda = device.type == "cuda"
        self.flush_buffer = None
        if self.cuda and l2_flush:
            self.flush_buffer = torch.empty(max(2 * l2_bytes, MIN_FLUSH_BYTES) // 4, dtype=torch.float32, device=device)
        # The real clocks, captured before any candidate code ran (see capture_clocks).
        self._sync = REAL_CLOCKS["synchronize"] if self.cuda else (lambda *a: None)
        self._perf = REAL_CLOCKS["perf_counter"]
        self._event = REAL_CLOCKS["event"] if self.cuda else None
        self._mono = REAL_CLOCKS["monotonic"]
        # CPU: each callable's total on the timer clock and on an independent clock (checks.clock_findings).
        self.clock_totals: dict[str, tuple[float, float]] = {}
        self.host_order: list[str] = []  # the callables in the order host_times called them
        # CUDA, the last event_times: per callable, one flag per timed call, whether the GPU may have waited
        # for the host in it (late_launches), and what the host did meanwhile (host_load).
        self.late_calls: dict[str, list[bool]] = {}
        self.host_load: HostLoad | None = None
        self._spin = REAL_CLOCKS.get("spin") if self.cuda and launch_cover else None
        self._calibration: tuple[float, float] | None = None  # (spin cycles per µs, flush µs), once per timer
        self.cover: LaunchCover | None = None  # the last event_times' launch cover (None without a spin kernel)
        self.cover_load_from = cover_load_from  # the callable whose queueing measures the host's load (LaunchCover)

    def flush(self) -> None:
        if self.flush_buffer is not None:
            self.flush_buffer.zero_()

    def _calibrate(self) -> tuple[float, float]:
        """The spin kernel's cycles per µs and the flush's device time (µs), measured once with the clocks up
        (after a warm-up): the cover is asked for in µs, the spin kernel counts SM cycles."""
        if self._calibration is None:
            assert self._spin is not None and self._event is not None
            spin_start, spin_end, flush_end = (self._event(enable_timing=True) for _ in range(3))
            self.flush()  # the GPU busy while the host queues the rest: no launch gap in what is measured
            spin_start.record()
            self._spin(CALIBRATION_CYCLES)
            spin_end.record()
            for _ in range(4):
                self.flush()
            flush_end.record()
            self._sync()
            spin_ms = max(spin_start.elapsed_time(spin_end), 1e-6)
            self._calibration = (CALIBRATION_CYCLES / (spin_ms * 1e3), spin_end.elapsed_time(flush_end) * 1e3 / 4)
        return self._calibration

    def event_times(self, fns: dict[str, Callable[[], Any]], warmup: int, trials: int, *, warmup_ms: float = 0.0,
                    min_time_ms: float = 0.0, max_trials: int | None = None, max_time_ms: float = 0.0,
                    hooks: Any = None) -> dict[str, list[float]]:
        """Interleaved samples (ms) of each callable, flushed before every call.

        Warm-up runs `warmup` rounds and at least `warmup_ms`, so clocks that dropped while the GPU sat
        idle (a worker waiting for its turn) have come back up before anything is timed. Then at least
        `trials` rounds, more for short callables until each has about `min_time_ms` of samples (at most
        `max_trials`): 50 calls of a 60 µs kernel are a 3 ms window, too short to repeat to a few %.

        Long callables get less, where `max_time_ms` is set: warm-up rounds stop at a quarter of it (past
        `warmup_ms` and one round: the checks before already ran both sides at these sizes), and the trials
        at about `max_time_ms` per callable, never under MIN_TRIALS. A 30 ms convolution's 60 rounds held
        the GPU alone for 3.6 s; its median over 13 repeats to a fraction of a percent.

        `hooks` (optional: begin(trials), before(name), after(name, output)) run outside the timed window of
        each timed call; checks.TimedOutputCheck compares sampled outputs there."""
        names = list(fns)
        start = self._perf()
        rounds = 0
        first_round_ms: float | None = None  # the first round's time, waited for (the host runs ahead)

        def warming() -> bool:
            nonlocal first_round_ms
            if max_time_ms > 0 and rounds == 1 and first_round_ms is None:
                self._sync()
                first_round_ms = (self._perf() - start) * 1e3
            if (self._perf() - start) * 1e3 < warmup_ms:
                return True
            long_enough = first_round_ms is not None and rounds * first_round_ms >= max_time_ms / 4
            return rounds < warmup and not long_enough

        host_call_s: dict[str, list[float]] = {n: [] for n in names}  # the launch cover's first expectation
        while warming():
            for n in names:
                call_start = self._perf()
                fns[n]()
                host_call_s[n].append(self._perf() - call_start)
            rounds += 1
            if warmup_ms > 0 and rounds % 8 == 0:
                self._sync()  # keep the host from racing ahead of the device
        self._sync()
        per_call_ms = max((self._perf() - start) * 1e3 / (rounds * len(names)), 1e-6) if rounds else None
        if min_time_ms > 0 and per_call_ms is not None:
            wanted = math.ceil(min_time_ms / per_call_ms)
            trials = max(trials, min(wanted, max_trials or wanted))
        if max_time_ms > 0 and per_call_ms is not None:  # whether or not min_time_ms is set
            trials = min(trials, max(min(trials, MIN_TRIALS), math.floor(max_time_ms / per_call_ms)))
        samples: dict[str, list[float]] = {n: [] for n in names}
        self.late_calls = {n: [] for n in names}
        self.cover, cycles_per_us, flush_us = None, 0.0, 0.0
        if self._spin is not None:
            try:
                cycles_per_us, flush_us = self._calibrate()
            except Exception:  # a torch without a working spin kernel: the flush alone, as before the cover
                self._spin = None
        if self._spin is not None:
            self.cover = LaunchCover({n: [t * 1e6 for t in host_call_s[n]] for n in names},
                                     flush_us if self.flush_buffer is not None else 0.0, self.cover_load_from)
        probe = HostLoadProbe(_device_maps if self.cuda else None)
        probe.start()
        if hooks is not None:
            hooks.begin(trials)
        # Events are created before the loop: nothing but the call itself sits between start and end.
        events = [(self._event(enable_timing=True), self._event(enable_timing=True))
                  for _ in range(trials * len(names))] if self.cuda else []
        recorded: list[tuple[str, Any, Any]] = []
        queued_s: dict[str, list[float]] = {n: [] for n in names}  # host: flush launch to end event queued
        iteration_s: dict[str, list[float]] = {n: [] for n in names}  # host: the whole iteration, hooks included
        for i in range(trials):
            order = names if i % 2 == 0 else names[::-1]
            for j, n in enumerate(order):
                iteration_start = self._perf()
                if hooks is not None:
                    hooks.before(n)
                queue_start = self._perf()
                self.flush()
                if self.cuda:
                    # No synchronize between calls: the host queues the next call while the flush runs,
                    # so the window holds the call's GPU work, not our launch latency after an idle GPU
                    # (waiting per call added 5-40 µs of jitter to 70-150 µs kernels on an H200).
                    start_ev, end_ev = events[i * len(names) + j]
                    cover_us = self.cover.cover_us(n) if self.cover is not None else 0.0
                    if cover_us > 0:  # the GPU still busy once the host has queued the call (LaunchCover)
                        self._spin(int(cover_us * cycles_per_us))
                    start_ev.record()
                    out = fns[n]()
                    end_ev.record()
                    queued_s[n].append(self._perf() - queue_start)
                    recorded.append((n, start_ev, end_ev))
                    # The GPU already past the start event once the host has queued the call: it may have
                    # waited for the host's launch inside the timed pair (a host slower than the flush that
                    # covers it, e.g. under load). Asked after the end event is queued: nothing timed waits.
                    self.late_calls[n].append(bool(start_ev.query()))
                    if self.cover is not None:
                        self.cover.observed(n, queued_s[n][-1] * 1e6)
                else:
                    m0, t0 = self._mono(), self._perf()
                    out = fns[n]()
                    t1, m1 = self._perf(), self._mono()
                    samples[n].append((t1 - t0) * 1e3)
                    timer_s, mono_s = self.clock_totals.get(n, (0.0, 0.0))
                    self.clock_totals[n] = (timer_s + t1 - t0, mono_s + m1 - m0)
                if hooks is not None:
                    hooks.after(n, out)
                del out
                iteration_s[n].append(self._perf() - iteration_start)
        if recorded:
            self._sync()
        self.host_load = probe.stop(_median_us(queued_s), _median_us(iteration_s))
        for n, start_ev, end_ev in recorded:
            samples[n].append(start_ev.elapsed_time(end_ev))
        return samples

    def late_launches(self) -> dict[str, float]:
        """Per callable, the share of the last event window's timed calls whose start event the GPU had reached
        before the host finished queuing the call (empty off CUDA): 0 on an idle host whose launches the
        flush covers; near 1 for a call the host cannot queue as fast as the GPU runs it."""
        return {n: round(sum(flags) / len(flags), 4) for n, flags in self.late_calls.items() if flags}

    def host_times(self, fns: dict[str, Callable[[], Any]], trials: int, *, hooks: Any = None,
                   flush: Callable[[], None] | None = None) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
        """CUDA only: device-wide synchronized host timing, with CUDA events on the current stream around
        the same calls: (host ms, event ms). Work hidden on side streams or threads is in the first, not
        the second. `hooks` (before(name), after(name, output)) run outside the timed part of each call;
        `flush` replaces the L2 flush (kernel_timer.py flushes on a stream of its own); `host_order` keeps
        the order of the calls."""
        names = list(fns)
        host: dict[str, list[float]] = {n: [] for n in names}
        event: dict[str, list[float]] = {n: [] for n in names}
        self.host_order = []
        for i in range(trials):
            order = names if i % 2 == 0 else names[::-1]
            for n in order:
                if hooks is not None:
                    hooks.before(n)
                (flush or self.flush)()
                self.host_order.append(n)
                self._sync()
                start_ev, end_ev = self._event(enable_timing=True), self._event(enable_timing=True)
                t0 = self._perf()
                start_ev.record()
                out = fns[n]()
                end_ev.record()
                self._sync()
                host[n].append((self._perf() - t0) * 1e3)
                event[n].append(start_ev.elapsed_time(end_ev))
                if hooks is not None:
                    hooks.after(n, out)
                del out
        return host, event
