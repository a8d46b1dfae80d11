"""The launch cover (engine/worker/timing.py LaunchCover): a timed call is queued behind a spin kernel long enough
that the host has launched it before the GPU reaches its start event, so a slow host's launch time stays out of
the call's events. The rule on any machine; on a GPU, a call whose host launch takes ~300 µs before a short
kernel is timed at the kernel's device time with the cover, and at the host's pace without it."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import pytest
from cudaforge.engine.worker import timing
from cudaforge.engine.worker.timing import COVER_MARGIN, COVER_WINDOW, MAX_COVER_US, LaunchCover


def test_no_cover_where_the_flush_outlasts_the_hosts_queueing() -> None:
    cover = LaunchCover({"reference": [10.0, 12.0, 30.0], "candidate": [20.0, 25.0]}, flush_us=60.0)
    # the expected queueing = the call's host time + the flush, cover and event records (EVENT_QUEUE_US)
    assert cover.cover_us("reference") == 0.0
    assert cover.cover_us("candidate") == 0.0
    cover.observed("candidate", 40.0)
    assert cover.cover_us("candidate") == 0.0  # on time: nothing to cover


def test_a_loaded_host_gets_its_delay_covered_beyond_the_calls_own_cost() -> None:
    # the call costs the host 30 µs when the host is free; loaded, 150 µs: the delay beyond the flush is covered
    cover = LaunchCover({"candidate": [30.0, 150.0, 150.0, 160.0]}, flush_us=50.0)
    expected = 150.0 + timing.EVENT_QUEUE_US
    assert cover.cover_us("candidate") == pytest.approx(COVER_MARGIN * (expected - 50.0))
    assert cover.cover_us("candidate") + 50.0 > expected  # flush + cover outlast the loaded queueing
    for _ in range(COVER_WINDOW):  # the load goes: the cover follows the recent calls down to none
        cover.observed("candidate", 40.0)
    assert cover.cover_us("candidate") == 0.0
    for queued in (300.0, 320.0, 310.0, 330.0, 305.0, 310.0, 315.0, 310.0):  # it comes back, worse
        cover.observed("candidate", queued)
    assert cover.cover_us("candidate") == pytest.approx(COVER_MARGIN * (310.0 - 50.0))
    assert cover.largest_us["candidate"] == pytest.approx(COVER_MARGIN * (310.0 - 50.0))


def test_the_window_counts_what_the_spins_added() -> None:
    cover = LaunchCover({"reference": [30.0, 150.0, 150.0, 160.0]}, flush_us=50.0)
    first = cover.cover_us("reference")
    assert first == pytest.approx(COVER_MARGIN * (150.0 + timing.EVENT_QUEUE_US - 50.0))
    second = cover.cover_us("reference")
    assert cover.total_us["reference"] == pytest.approx(first + second)  # every spin, in the window's wall
    assert cover.largest_us["reference"] == pytest.approx(first)


def test_a_host_bound_call_stays_host_bound() -> None:
    # 300 µs of Python before its kernel whatever the load: an idle machine's do_bench times the host there,
    # so the cover adds nothing for it (only the jitter above its least time)
    cover = LaunchCover({"candidate": [300.0, 302.0, 305.0, 301.0]}, flush_us=50.0)
    assert cover.cover_us("candidate") < 5.0
    for queued in (318.0, 320.0, 316.0, 325.0, 319.0, 317.0, 321.0, 340.0):
        cover.observed("candidate", queued)
    assert cover.cover_us("candidate") < 0.05 * 300.0  # the jitter's: its events stay the host's pace


def test_without_a_warm_up_the_first_timed_call_shows_the_calls_own_cost_first() -> None:
    cover = LaunchCover({"candidate": []}, flush_us=50.0)
    assert cover.cover_us("candidate") == 0.0
    cover.observed("candidate", 300.0)  # host-bound by itself: 300 µs is its own cost, nothing to cover
    assert cover.cover_us("candidate") == 0.0
    cover.observed("candidate", 40.0)  # then a quick one: the 300 µs was a loaded host's
    cover.observed("candidate", 320.0)
    assert cover.cover_us("candidate") == pytest.approx(COVER_MARGIN * (300.0 - 50.0))


def _with_reference(reference: list[float], candidate: list[float], flush_us: float = 53.0) -> LaunchCover:
    return LaunchCover({"reference": reference, "candidate": candidate}, flush_us=flush_us, load_from="reference")


def test_the_reference_measures_the_load_and_a_loaded_candidate_is_covered_as_far_as_it_explains() -> None:
    # session 39's gelu on a loaded H200: the reference queued in about 4x its least, the candidate in 163 µs
    cover = _with_reference([10.0] * 8, [25.0] * 8)  # least: reference 25, candidate 40 (+ EVENT_QUEUE_US)
    for _ in range(COVER_WINDOW):
        cover.observed("reference", 100.0)
        cover.observed("candidate", 163.0)
    assert cover.cover_us("reference") == pytest.approx(COVER_MARGIN * (100.0 - 53.0))
    # expected min(163, 40 x 100/25 = 160): the flush and the cover outlast nearly all of it
    assert cover.cover_us("candidate") == pytest.approx(COVER_MARGIN * (160.0 - 53.0))


def test_candidate_code_cannot_buy_a_cover_with_its_own_host_time() -> None:
    # one quick warm-up call, then 300 µs of host work before every launch (reading the inputs on a side stream
    # while the GPU would spin), on an unloaded host: the reference's queueing does not move, nothing is covered
    cover = _with_reference([10.0] * 8, [5.0] + [300.0] * 7)
    for _ in range(COVER_WINDOW):
        cover.observed("reference", 26.0)
        cover.observed("candidate", 315.0)
    assert cover.cover_us("candidate") == 0.0
    # the same from its own figures alone (no load callable) would have covered most of that work
    alone = LaunchCover({"candidate": [5.0] + [300.0] * 7}, flush_us=53.0)
    for _ in range(COVER_WINDOW):
        alone.observed("candidate", 315.0)
    assert alone.cover_us("candidate") > 250.0


def test_a_host_bound_candidate_on_a_loaded_host_gets_the_loads_delay_covered_not_its_own_time() -> None:
    cover = _with_reference([10.0] * 8, [300.0] * 8)  # least: reference 25, candidate 315
    for _ in range(COVER_WINDOW):  # 100 µs of preemption in every call, on both sides
        cover.observed("reference", 125.0)
        cover.observed("candidate", 415.0)
    assert cover.cover_us("candidate") == pytest.approx(COVER_MARGIN * (415.0 - 315.0))


def test_no_cover_for_a_candidate_before_the_reference_has_a_least() -> None:
    cover = _with_reference([], [20.0] * 4)
    cover.observed("candidate", 400.0)
    assert cover.cover_us("candidate") == 0.0


def test_the_cover_never_passes_its_cap() -> None:
    cover = LaunchCover({"candidate": [20.0]}, flush_us=30.0)
    for _ in range(COVER_WINDOW):  # a host stalled for a second per call
        cover.observed("candidate", 1e6)
    assert cover.cover_us("candidate") == MAX_COVER_US == cover.largest_us["candidate"]


def test_the_cpu_timer_queues_no_cover() -> None:
    import torch

    timer = timing.Timer(torch.device("cpu"), l2_flush=True, l2_bytes=1 << 20)
    samples = timer.event_times({"a": lambda: sum(range(500)), "b": lambda: sum(range(800))}, warmup=1, trials=5)
    assert len(samples["a"]) == len(samples["b"]) == 5
    assert timer.cover is None and timer.late_launches() == {}


def _launch_after(kernel: Callable[[], object], host_s: Callable[[int], float]) -> Callable[[], object]:
    """`kernel` launched after `host_s(call number)` seconds of host work (Python; a loaded machine)."""
    calls = [0]

    def call() -> object:
        end = time.perf_counter() + host_s(calls[0])
        calls[0] += 1
        while time.perf_counter() < end:
            pass
        return kernel()
    return call


@pytest.mark.gpu
def test_a_loaded_hosts_delay_stays_out_of_the_events_and_a_host_bound_calls_own_does_not() -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    timing.capture_clocks()
    device = torch.device("cuda")
    x = torch.randn(1 << 22, device=device)  # 16 MB: a relu of a few tens of µs
    l2 = int(torch.cuda.get_device_properties(device).L2_cache_size)

    def relu() -> object:
        return torch.relu(x)

    quick = timing.Timer(device, l2_flush=True, l2_bytes=l2)
    device_us = statistics.median(quick.event_times({"relu": relu}, warmup=20, trials=50)["relu"]) * 1e3

    # Loaded: three calls in four wait 0.3 ms on the host (another process had the core), the fourth does not.
    def loaded() -> dict[str, Callable[[], object]]:
        return {side: _launch_after(relu, lambda i: 300e-6 if i % 4 else 0.0) for side in ("reference", "candidate")}

    covered = timing.Timer(device, l2_flush=True, l2_bytes=l2, cover_load_from="reference")
    with_cover = covered.event_times(loaded(), warmup=16, trials=80)
    bare = timing.Timer(device, l2_flush=True, l2_bytes=l2)
    bare._spin = None  # the flush alone in front of each call: the timer as it was before the cover
    without = bare.event_times(loaded(), warmup=16, trials=80)
    covered_us = statistics.median(with_cover["candidate"]) * 1e3
    bare_us = statistics.median(without["candidate"]) * 1e3
    assert covered.cover is not None and covered.cover.largest_us["candidate"] >= 200.0
    assert max(covered.late_launches().values()) <= 0.15, covered.late_launches()
    assert covered_us < device_us * 1.15 + 3.0, (covered_us, device_us)  # the kernel's time, not the host's
    assert bare.cover is None and min(bare.late_launches().values()) >= 0.6, bare.late_launches()
    assert bare_us > device_us + 150.0, (bare_us, device_us)  # the GPU waited for the host inside the events

    # Host-bound by itself: every call waits 0.3 ms. do_bench on an idle machine times the host's pace; so do we.
    own = timing.Timer(device, l2_flush=True, l2_bytes=l2)
    bound = own.event_times({"candidate": _launch_after(relu, lambda i: 300e-6)}, warmup=16, trials=60)
    assert own.cover is not None and own.cover.largest_us["candidate"] < 60.0
    assert min(own.late_launches().values()) >= 0.9, own.late_launches()
    assert statistics.median(bound["candidate"]) * 1e3 > device_us + 150.0


def test_the_setting_turns_the_spin_kernel_off() -> None:
    """`[timing] launch_cover = false` (engine/config.py; the pipeline passes it to the Timer, bench/timing_fidelity.py
    --no-launch-cover for the A/B): the timer keeps no spin kernel and times with the flush alone."""
    import torch
    from cudaforge.engine.config import defaults

    assert defaults()["timing"]["launch_cover"] is True
    timing.capture_clocks()
    cuda = torch.device("cuda")  # no allocation without the flush buffer: this runs on a CPU-only torch too
    assert timing.Timer(cuda, l2_flush=False, l2_bytes=0)._spin is torch.cuda._sleep
    assert timing.Timer(cuda, l2_flush=False, l2_bytes=0, launch_cover=False)._spin is None
