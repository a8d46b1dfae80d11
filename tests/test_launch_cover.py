"""The launch cover (engine/worker/timing.py LaunchCover): a timed call is queued behind a spin kernel long enough
that the host has launched it before the GPU reaches its start event, so a slow host's launch time stays out of
the call's events. The rule on any machine; on a GPU, a call whose host launch takes ~300 µs before a short
kernel is timed at the kernel's device time with the cover, and at the host's pace without it."""

from __future__ import annotations

import statistics
import time

import pytest
from cudaforge.engine.worker import timing
from cudaforge.engine.worker.timing import COVER_MARGIN, MAX_COVER_US, LaunchCover


def test_no_cover_where_the_flush_outlasts_the_hosts_queueing() -> None:
    cover = LaunchCover({"reference": 10.0, "candidate": 20.0}, flush_us=60.0)
    # expected queueing = the call's host time + the flush, cover and event records (EVENT_QUEUE_US)
    assert cover.cover_us("reference") == 0.0
    assert cover.cover_us("candidate") == 0.0
    cover.observed("candidate", 40.0, late=False)
    assert cover.cover_us("candidate") == 0.0  # on time: nothing grows


def test_the_cover_outlasts_a_slow_hosts_queueing_beyond_the_flush() -> None:
    cover = LaunchCover({"reference": 100.0, "candidate": 150.0}, flush_us=50.0)
    ref, cand = cover.cover_us("reference"), cover.cover_us("candidate")
    assert ref == pytest.approx(COVER_MARGIN * (100.0 + timing.EVENT_QUEUE_US) - 50.0)
    assert cand == pytest.approx(COVER_MARGIN * (150.0 + timing.EVENT_QUEUE_US) - 50.0)
    assert cand + 50.0 > 150.0 + timing.EVENT_QUEUE_US  # flush + cover outlast the expected queueing
    assert cover.largest_us == {"reference": ref, "candidate": cand}


def test_a_late_call_grows_the_cover_to_its_queueing_at_least_and_never_past_the_cap() -> None:
    cover = LaunchCover({"candidate": 20.0}, flush_us=30.0)
    before = cover.cover_us("candidate")
    cover.observed("candidate", 400.0, late=True)  # the host took 400 µs: the GPU waited
    after = cover.cover_us("candidate")
    assert after > before and after + 30.0 >= 400.0
    for _ in range(40):  # late whatever the cover (a host hiccup, a preemption): the cover stops at the cap
        cover.observed("candidate", 1e6, late=True)
    assert cover.cover_us("candidate") == MAX_COVER_US
    assert cover.largest_us["candidate"] == MAX_COVER_US


def test_a_host_bound_call_gets_no_cover() -> None:
    # an RNN's hundreds of launches (19 ms of host per call) or a call that synchronizes inside: the GPU waits
    # within the call whatever runs before it, so a cover would only lengthen the exclusive window
    cover = LaunchCover({"reference": 19_000.0, "candidate": 40.0}, flush_us=50.0)
    assert cover.host_bound == {"reference"}
    assert cover.cover_us("reference") == 0.0
    cover.observed("reference", 19_500.0, late=True)
    assert cover.cover_us("reference") == 0.0 and cover.largest_us["reference"] == 0.0
    assert cover.cover_us("candidate") > 0.0


def test_the_cpu_timer_queues_no_cover() -> None:
    import torch

    timer = timing.Timer(torch.device("cpu"), l2_flush=True, l2_bytes=1 << 20)
    samples = timer.event_times({"a": lambda: sum(range(500)), "b": lambda: sum(range(800))}, warmup=1, trials=5)
    assert len(samples["a"]) == len(samples["b"]) == 5
    assert timer.cover is None and timer.late_launches() == {}


def _slow_launch(kernel: object, host_s: float) -> object:
    def call() -> object:
        end = time.perf_counter() + host_s
        while time.perf_counter() < end:  # the host's own work before the launch (Python, a busy machine)
            pass
        return kernel()
    return call


@pytest.mark.gpu
def test_a_slow_host_launch_stays_out_of_the_events_with_the_cover() -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    timing.capture_clocks()
    device = torch.device("cuda")
    x = torch.randn(1 << 22, device=device)  # 16 MB: a relu of a few tens of µs
    fns = {"reference": _slow_launch(lambda: torch.relu(x), 300e-6),
           "candidate": _slow_launch(lambda: torch.relu(x), 300e-6)}
    l2 = int(torch.cuda.get_device_properties(device).L2_cache_size)
    quick = timing.Timer(device, l2_flush=True, l2_bytes=l2)
    device_us = statistics.median(quick.event_times({"relu": lambda: torch.relu(x)}, warmup=20, trials=50)["relu"]) * 1e3

    covered = timing.Timer(device, l2_flush=True, l2_bytes=l2)
    with_cover = covered.event_times(fns, warmup=10, trials=60)
    bare = timing.Timer(device, l2_flush=True, l2_bytes=l2)
    bare._spin = None  # the flush alone in front of each call: the timer as it was before the cover
    without = bare.event_times(fns, warmup=10, trials=60)

    covered_us = statistics.median(with_cover["candidate"]) * 1e3
    bare_us = statistics.median(without["candidate"]) * 1e3
    assert covered.cover is not None and covered.cover.largest_us["candidate"] >= 200.0
    assert max(covered.late_launches().values()) <= 0.1, covered.late_launches()
    assert covered_us < device_us * 1.15 + 3.0, (covered_us, device_us)  # the kernel's time, not the host's
    assert bare.cover is None and min(bare.late_launches().values()) >= 0.9, bare.late_launches()
    assert bare_us > device_us + 150.0, (bare_us, device_us)  # the GPU waited for the host inside the events
