"""The CUPTI kernel-time timer (#23): the union of kernel intervals, the split of the device timeline at
our flush kernels, the 15% rule; on a GPU, honest kernels agree with the events and side-stream work does
not."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from adversarial_kit import describe, evaluate, names
from cudaforge.engine.integrity.evidence import TIMER_TOLERANCE, timer_disagreement_finding
from cudaforge.engine.worker.kernel_timer import Activity, busy_per_call, union_ms

ADV_CUDA = Path(__file__).parent / "adversarial" / "cuda"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
US = 1000  # ns


def test_union_counts_overlapping_work_once() -> None:
    assert union_ms([]) == 0.0
    assert union_ms([(0, 10 * US)]) == pytest.approx(0.010)
    # two streams overlapping for 5 µs, then a gap, then a kernel inside another: 15 + 20 µs
    assert union_ms([(0, 10 * US), (5 * US, 15 * US), (100 * US, 120 * US), (105 * US, 110 * US)]) == \
        pytest.approx(0.035)
    assert union_ms([(10 * US, 20 * US), (0, 5 * US)]) == pytest.approx(0.015)  # any order
    assert union_ms([(0, 10 * US), (10 * US, 20 * US)]) == pytest.approx(0.020)  # touching


def _flush(t_us: int) -> Activity:
    return Activity(t_us * US, (t_us + 3) * US, stream=99, name="fill (our flush)")


def test_the_timeline_is_split_at_our_flush_kernels_and_they_are_left_out() -> None:
    order = ["reference", "candidate", "candidate", "reference"]
    acts = [_flush(0),  # the marker before the first call
            _flush(10), Activity(20 * US, 60 * US, 7, "ref_kernel"),
            _flush(100), Activity(110 * US, 130 * US, 7, "cand"), Activity(120 * US, 150 * US, 13, "side"),
            _flush(200), Activity(210 * US, 230 * US, 7, "cand"),
            _flush(300), Activity(310 * US, 350 * US, 7, "ref_kernel")]
    busy, note = busy_per_call(list(reversed(acts)), order)  # the records may come in any order
    assert note == ""
    assert busy["reference"] == [pytest.approx(0.040), pytest.approx(0.040)]
    # the side-stream kernel overlaps the candidate's own by 10 µs: 40 µs busy, not 50
    assert busy["candidate"] == [pytest.approx(0.040), pytest.approx(0.020)]


def test_a_call_without_kernels_is_zero_busy_and_missing_flushes_are_said() -> None:
    busy, note = busy_per_call([_flush(0), _flush(10), _flush(20), Activity(25 * US, 30 * US, 7, "k")],
                               ["reference", "candidate"])
    assert note == "" and busy == {"reference": [0.0], "candidate": [pytest.approx(0.005)]}
    busy, note = busy_per_call([_flush(0), _flush(10)], ["reference", "candidate"])
    assert busy == {} and "cannot be told apart" in note
    assert busy_per_call([], ["reference"]) == ({}, "no CUPTI activity records")


def test_events_more_than_15_percent_below_the_busy_time_disagree() -> None:
    assert TIMER_TOLERANCE == 0.15
    assert timer_disagreement_finding(0.090, 0.100) is None  # 10% less: within
    assert timer_disagreement_finding(0.086, 0.100) is None
    assert timer_disagreement_finding(0.300, 0.100) is None  # events above: launch gaps, no finding
    assert timer_disagreement_finding(0.010, 0.0) is None  # nothing ran on the device
    f = timer_disagreement_finding(0.020, 0.100, 0.5, 0.49)
    assert f is not None and f.name == "timer_disagreement" and f.severity == "warn"
    assert f.evidence["ratio"] == pytest.approx(0.2) and f.evidence["cupti_busy_candidate_ms"] == 0.100
    assert "80% less" in f.message


def test_on_the_cpu_device_the_timer_is_absent_and_says_so(cpu_options) -> None:
    r = evaluate(cpu_options, "honest.py")
    assert r.outcome == "ok" and r.timing is not None, describe(r)
    assert r.timing.kernel_candidate is None and r.timing.kernel_reference is None
    assert r.timing.kernel_timer == "absent: the CPU device launches no kernels"
    from cudaforge.engine.result_text import format_result

    assert "CUPTI kernel timer absent: the CPU device launches no kernels" in format_result(r)


# ------------------------------------------------------------------ GPU


@pytest.fixture(scope="module")
def gpu_opts(gpu_options):
    return replace(gpu_options, timing={**gpu_options.timing, "noise_threshold": 0.25, "noise_retries": 2})


def _evaluate_example(options, example: str):  # -> EvalResult
    import asyncio

    from cudaforge.engine.candidate import load_candidate
    from cudaforge.engine.evaluation.evaluator import Evaluator
    from cudaforge.engine.task import load_task

    folder = EXAMPLES / example
    return asyncio.run(Evaluator(options).evaluate(load_task(folder / "task.py"), load_candidate(folder / "nvrtc.py")))


@pytest.mark.gpu
@pytest.mark.parametrize("example", ["matmul", "gemm_epilogue"])
def test_gpu_honest_long_kernels_agree_with_the_events_within_5_percent(gpu_opts, example: str) -> None:
    """Millisecond kernels: launch overhead is lost in them, so the two clocks measure the same thing."""
    r = _evaluate_example(gpu_opts, example)
    assert r.outcome == "ok", describe(r)
    t = r.timing
    assert t is not None and t.kernel_candidate is not None and t.kernel_reference is not None, t
    assert t.kernel_candidate.median_ms == pytest.approx(t.candidate.median_ms, rel=0.05), describe(r)
    assert t.kernel_reference.median_ms == pytest.approx(t.reference.median_ms, rel=0.05), describe(r)
    assert "timer_disagreement" not in names(r)


@pytest.mark.gpu
@pytest.mark.parametrize("example", ["relu", "gelu", "softmax", "layernorm", "maxpool2d"])
def test_gpu_honest_short_kernels_never_time_below_their_busy_time(gpu_opts, example: str) -> None:
    """~60-100 µs kernels: the events may hold some launch latency above the busy time (no finding), never
    meaningfully less."""
    r = _evaluate_example(gpu_opts, example)
    assert r.outcome == "ok", describe(r)
    t = r.timing
    assert t is not None and t.kernel_candidate is not None, t
    assert t.candidate.median_ms >= 0.95 * t.kernel_candidate.median_ms, describe(r)
    assert "timer_disagreement" not in names(r)


@pytest.mark.gpu
def test_gpu_side_stream_work_disagrees_or_fails(gpu_opts) -> None:
    r = evaluate(gpu_opts, "cuda/side_stream.py", ADV_CUDA / "task.py")
    assert r.outcome == "integrity_failure", describe(r)
    assert {"timer_disagreement", "hidden_async_work"} & names(r), describe(r)
    assert r.timing is not None and r.timing.kernel_candidate is not None
    assert r.timing.kernel_candidate.median_ms > r.timing.candidate.median_ms, describe(r)


# The longest cover a host-bound candidate may get: a third of its 0.3 ms host spin. Its largest cover is host
# jitter above its least queueing (70 µs on an H100 with 16 CPUs, session 41), never the spin itself.
COVER_BOUND_US = 100.0


def _relu_after_host_spin(options, tmp_path: Path, spins_when: str):  # -> EvalResult
    """A relu task evaluated against candidate code that spins 0.3 ms on the host before its relu on the calls
    where `spins_when` (a Python expression; `ModelNew.calls` counts the calls from 1) holds."""
    import asyncio

    from cudaforge.engine.candidate import Candidate
    from cudaforge.engine.evaluation.evaluator import Evaluator
    from cudaforge.engine.task import load_task

    task = tmp_path / "task.py"
    task.write_text("import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                    "        return torch.relu(x)\n\n\ndef get_inputs():\n    return [torch.randn(1 << 20)]\n\n\n"
                    "def get_init_inputs():\n    return []\n")
    source = ("import time\nimport torch\n\n\nclass ModelNew(torch.nn.Module):\n    calls = 0\n\n"
              f"    def forward(self, x):\n        ModelNew.calls += 1\n        if {spins_when}:\n"
              "            t = time.perf_counter()\n            while time.perf_counter() - t < 3e-4:\n"
              "                pass\n        return torch.relu(x)\n")
    return asyncio.run(Evaluator(options).evaluate(load_task(task), Candidate(source=source, format="python")))


@pytest.mark.gpu
def test_gpu_a_call_the_host_queues_slower_than_the_gpu_runs_it_is_counted_late(gpu_opts, tmp_path: Path) -> None:
    """A candidate that spins 0.3 ms on the host before its kernel, every call: the flush (tens of µs) cannot
    cover that, so the GPU reaches each start event before the call is queued, and the timing says so for nearly
    every call (settings["late_launches"], timing.Timer.late_launches). That is the candidate's own cost, not a
    loaded host's: the launch cover (timing.LaunchCover) stays near 0 and its events keep the host's pace, as an
    idle machine's do_bench would (settings["launch_cover_us"])."""
    r = _relu_after_host_spin(gpu_opts, tmp_path, "True")
    assert r.timing is not None, describe(r)
    late, cover = r.timing.settings["late_launches"], r.timing.settings["launch_cover_us"]
    assert late["candidate"] >= 0.9, (late, cover)
    assert 0.0 <= late["reference"] <= 1.0, late
    assert cover["candidate"] < COVER_BOUND_US, cover  # the jitter above its least host time, not its 0.3 ms
    assert r.timing.candidate.median_ms > r.timing.reference.median_ms + 0.15, describe(r)  # the host's pace
    # its host ran all along (it spins): late from a slow call, not from losing the core (timing.HostLoad)
    load = r.timing.settings["host_load"]
    assert load["cpu_s"] > 0.5 * load["wall_s"] > 0, load
    assert load["device_maps"] >= 0, load  # counted on CUDA (the allocator's device maps in the window)
    assert load["queue_us"]["candidate"] > 300, load  # its 0.3 ms host spin lies between flush and end event


@pytest.mark.gpu
def test_gpu_a_candidate_quick_now_and_then_gets_no_cover_for_its_host_time(gpu_opts, tmp_path: Path) -> None:
    """Candidate code that queues one call in twenty quickly and spends 0.3 ms on the host before every other
    launch, on an unloaded host: from its own figures the launch cover would have spun through that host time
    (its least is the quick call's), and its events would have shown its relu's. The cover reads the host's load
    from the reference's queueing (timing.LaunchCover `load_from`), which did not move: no cover, and the events
    keep the candidate's host time."""
    r = _relu_after_host_spin(gpu_opts, tmp_path, "ModelNew.calls % 20")
    assert r.timing is not None, describe(r)
    cover = r.timing.settings["launch_cover_us"]
    assert cover["candidate"] < COVER_BOUND_US, cover
    assert r.timing.candidate.median_ms > r.timing.reference.median_ms + 0.15, describe(r)  # its host time counted


def test_the_exclusive_hold_goes_before_cupti_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ending the profiler session and reading its records are host work: `done()` (where the worker lets the GPU
    go) comes right after the host-timed calls, before the session stops; on an exception in the calls the
    session still stops and `done()` is left to the caller's failure path. CUPTI itself needs a GPU: here the
    session is a recorder of the order of the steps."""
    from cudaforge.engine.worker import kernel_timer

    order: list[str] = []

    class Session:
        note = ""

        def __init__(self, timer: object) -> None:
            self.flush = lambda: None

        def start(self) -> None:
            order.append("start")

        def stop(self) -> None:
            order.append("stop")

        def busy(self, names: list[str]) -> dict[str, list[float]]:
            order.append("read")
            return {}

    monkeypatch.setattr(kernel_timer, "KernelTimer", Session)

    class Timer:
        cuda = True
        host_order: list[str] = []

    def calls(flush: object) -> str:
        order.append("calls")
        return "out"

    out, busy, note = kernel_timer.with_kernel_timer(Timer(), calls, done=lambda: order.append("done"))
    assert (out, busy, note) == ("out", {}, "")
    assert order == ["start", "calls", "done", "stop", "read"]

    order.clear()

    def failing(flush: object) -> str:
        order.append("calls")
        raise RuntimeError("the candidate failed")

    with pytest.raises(RuntimeError):
        kernel_timer.with_kernel_timer(Timer(), failing, done=lambda: order.append("done"))
    assert order == ["start", "calls", "stop"]
