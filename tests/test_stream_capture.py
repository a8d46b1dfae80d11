"""The side-stream check by dependency structure (#23): which CUPTI records make it run, what a capture's
outcome decides, and that the capture always leaves the process as it found it (a stand-in torch here;
the real capture runs in tests/test_adversarial.py's GPU tests)."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from typing import Any

import pytest
from cudaforge.engine.integrity.registry import REGISTRY, finding
from cudaforge.engine.integrity.streams import (
    UNJOINED_MESSAGE,
    CaptureOutcome,
    StreamUse,
    capture_decision,
    capture_reasons,
    fold_hidden_work,
    is_unjoined,
    off_stream_work,
    undecided_finding,
)
from cudaforge.engine.worker import stream_capture
from cudaforge.engine.worker.kernel_timer import Activity

US = 1000  # ns
MARKER = "Memcpy DtoD (Device -> Device)"
# What torch raises when cudaStreamEndCapture refuses (c10's CUDA check: the error string, then its hints).
TORCH_UNJOINED = ("CUDA error: capturing stream has unjoined work\nSearch for `cudaErrorStreamCaptureUnjoined' in "
                  "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.\n"
                  "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
                  "below might be incorrect.")


# ------------------------------------------------------------------ when the check runs


def test_work_on_another_stream_after_the_marker_is_off_the_calling_stream() -> None:
    acts = [Activity(0, 2 * US, 7, "fill (a draw still running)"),  # before the marker: not the call's
            Activity(10 * US, 11 * US, 7, MARKER),
            Activity(20 * US, 40 * US, 7, "cf_adv_noop"),
            Activity(21 * US, 60 * US, 13, "cf_adv_relu"),
            Activity(30 * US, 35 * US, 14, "Memset (Device)"),
            Activity(61 * US, 70 * US, 13, "cf_adv_relu")]
    use = off_stream_work(list(reversed(acts)))  # the records may come in any order
    assert use == StreamUse(7, ("cf_adv_relu", "Memset (Device)"))


def test_one_stream_is_no_reason_and_a_missing_marker_says_the_ids_cannot_be_used() -> None:
    honest = [Activity(10 * US, 11 * US, 7, MARKER), Activity(20 * US, 40 * US, 7, "cf_adv_relu"),
              Activity(41 * US, 42 * US, 7, MARKER)]  # the candidate's own copy on the calling stream
    assert off_stream_work(honest) == StreamUse(7, ())
    # The side stream's kernel alone (the side_stream.py case): its stream is not the marker's.
    assert off_stream_work([Activity(10 * US, 11 * US, 7, MARKER), Activity(12 * US, 30 * US, 13, "relu")]) \
        == StreamUse(7, ("relu",))
    assert off_stream_work([Activity(0, US, 13, "relu")]) == StreamUse(None)
    assert off_stream_work([]) == StreamUse(None)


def test_the_capture_runs_only_with_a_reason() -> None:
    assert capture_reasons(False, None) == []
    assert capture_reasons(False, StreamUse(None)) == []
    assert capture_reasons(False, StreamUse(7, ())) == []  # honest: one stream, static clean
    static = capture_reasons(True, StreamUse(7, ()))
    assert len(static) == 1 and "static side_stream" in static[0]
    cupti = capture_reasons(False, StreamUse(7, ("a", "b", "c", "d")))
    assert len(cupti) == 1 and cupti[0].startswith("CUPTI") and "a, b, c, ..." in cupti[0]
    assert len(capture_reasons(True, StreamUse(7, ("relu",)))) == 2


# ------------------------------------------------------------------ what a capture decides


def test_only_cudas_unjoined_error_is_unjoined() -> None:
    assert is_unjoined(stream_capture.error_text(RuntimeError(TORCH_UNJOINED)))
    assert is_unjoined("cudaErrorStreamCaptureUnjoined")
    for other in ("CUDA error: operation not permitted when stream is capturing",
                  "CUDA error: operation failed due to a previous error during capture",
                  "CUDA error: dependency created on uncaptured work in another stream",
                  "CUDA error: operation would make the legacy stream depend on a capturing blocking stream",
                  "Capture must end on the same stream it began on.", ""):
        assert not is_unjoined(other), other


def test_error_text_is_one_line() -> None:
    text = stream_capture.error_text(RuntimeError(TORCH_UNJOINED))
    assert "\n" not in text and text.startswith("RuntimeError: CUDA error: capturing stream has unjoined work")
    assert len(stream_capture.error_text(RuntimeError("x" * 1000))) == 400


def test_an_unjoined_end_after_a_normal_return_is_a_failing_hidden_async_work() -> None:
    reasons = ["the source creates or uses a CUDA stream (static side_stream)"]
    outcome = CaptureOutcome("end", stream_capture.error_text(RuntimeError(TORCH_UNJOINED)))
    assert outcome.returned
    d = capture_decision(outcome, reasons)
    assert d.decided and d.finding is not None and d.note.startswith("unjoined")
    f = d.finding
    assert (f.name, f.severity, f.message) == ("hidden_async_work", "fail", UNJOINED_MESSAGE)
    assert "(stream capture: unjoined)" in f.message
    assert f.evidence == {"check": "stream_capture", "error": outcome.error, "reasons": reasons}
    assert undecided_finding(d, reasons) is None


def test_a_clean_end_on_our_own_stream_proves_every_fork_joined() -> None:
    d = capture_decision(CaptureOutcome(""), [])
    assert d.decided and d.finding is None and d.note.startswith("joined")
    assert undecided_finding(d, []) is None


@pytest.mark.parametrize(("outcome", "why"), [
    # A host sync or .item() in forward: the capture is invalidated; nothing is proven either way.
    (CaptureOutcome("forward", "RuntimeError: CUDA error: operation not permitted when stream is capturing"),
     "the forward raised under capture"),
    # The forward raised and the end then complained of unjoined work: forward did not return, so no proof.
    (CaptureOutcome("forward", "ValueError: only under capture; then: capturing stream has unjoined work"),
     "the forward raised under capture"),
    (CaptureOutcome("end", "RuntimeError: CUDA error: operation failed due to a previous error during capture"),
     "the capture failed"),
    (CaptureOutcome("begin", "AttributeError: no CUDAGraph"), "the capture did not start"),
    # A clean end on a stream of torch's pool: the candidate may hold it, so a fork from it may be no fork.
    (CaptureOutcome("", "", fresh_stream=False), "torch's pool"),
])
def test_any_other_outcome_decides_nothing_and_fails_nothing(outcome: CaptureOutcome, why: str) -> None:
    d = capture_decision(outcome, ["r"])
    assert not d.decided and d.finding is None and d.note.startswith("undecided") and why in d.note
    skipped = undecided_finding(d, ["r"])
    assert skipped is not None and skipped.name == "stream_capture_skipped" and skipped.severity == "info"
    assert why in skipped.message and skipped.evidence["reasons"] == ["r"]


def test_both_checks_finding_it_make_one_hidden_async_work() -> None:
    """The result's message names each failing finding once: the capture's finding carries the clocks'."""
    captured = capture_decision(CaptureOutcome("end", "capturing stream has unjoined work"), []).finding
    assert captured is not None
    timed = finding("hidden_async_work", "device-synchronized time exceeds ...", {"event_candidate_ms": 0.01})
    other = finding("side_stream")
    folded = fold_hidden_work([other, captured, timed])
    assert [f.name for f in folded] == ["side_stream", "hidden_async_work"]
    f = folded[1]
    assert f.evidence["check"] == "stream_capture" and f.evidence["timing"] == {"event_candidate_ms": 0.01}
    assert f.message == f"{UNJOINED_MESSAGE}; device-synchronized time exceeds ..." and f.severity == "fail"
    assert fold_hidden_work([other, timed]) == [other, timed]  # the clocks alone, or the capture alone: as is
    assert fold_hidden_work([captured]) == [captured]


def test_the_findings_are_registered_with_their_severities() -> None:
    assert REGISTRY["hidden_async_work"].severity == "fail" and REGISTRY["hidden_async_work"].fixed
    assert "stream capture" in REGISTRY["hidden_async_work"].message
    assert REGISTRY["stream_capture_skipped"].severity == "info"


# ------------------------------------------------------------------ the capture leaves the process usable


@dataclass
class _Stream:
    name: str
    capturing: bool = False
    cuda_stream: int = 0


class _FakeTorch:
    """The few torch.cuda calls capture_forward makes, with CUDA's capture rules reduced to a flag."""

    def __init__(self, end_error: str | None = None) -> None:
        self.end_error = end_error
        self.log: list[str] = []
        self.current = _Stream("default")
        self.routing: set[tuple[int, int]] = set()  # the allocator's pools under capture
        self.released: list[tuple[int, int]] = []
        fake = self

        class Graph:
            def __init__(self, keep_graph: bool = False) -> None:
                self.keep_graph = keep_graph
                self.pool: tuple[int, int] | None = None
                self.ended = False

            def capture_begin(self, pool: tuple[int, int], capture_error_mode: str) -> None:
                assert capture_error_mode == "thread_local" and fake.current.name != "default"
                fake.routing.add(pool)
                self.pool, self.stream = pool, fake.current
                fake.current.capturing = True
                fake.log.append("begin")

            def capture_end(self) -> None:
                assert fake.current is self.stream, "capture must end on the stream it began on"
                self.stream.capturing = False  # cudaStreamEndCapture ends it, even when it fails
                fake.log.append("end")
                if fake.end_error:
                    raise RuntimeError(fake.end_error)  # before the allocator hears of it (torch's order)
                fake.routing.discard(self.pool)  # type: ignore[arg-type]
                self.ended = True

            def reset(self) -> None:
                fake.log.append("reset")
                if self.ended:
                    fake.released.append(self.pool)  # type: ignore[arg-type]

        class StreamContext:
            def __init__(self, stream: _Stream) -> None:
                self.stream = stream

            def __enter__(self) -> None:
                self.saved, fake.current = fake.current, self.stream

            def __exit__(self, *exc: Any) -> None:
                fake.current = self.saved

        def end_allocate(index: int, pool: tuple[int, int]) -> None:
            if pool not in fake.routing:
                raise RuntimeError("endAllocatePool: not currently recording to mempool_id")
            fake.routing.discard(pool)

        self.cuda = types.SimpleNamespace(
            synchronize=lambda device=None: self.log.append("sync"),
            current_device=lambda: 0,
            current_stream=lambda device=None: self.current,
            set_stream=self._set_stream,
            graph_pool_handle=lambda: (0, 7),
            CUDAGraph=Graph,
            stream=StreamContext,
            is_current_stream_capturing=lambda: self.current.capturing,
            Stream=lambda device=None: _Stream("pool"),
        )
        self._C = types.SimpleNamespace(_cuda_endAllocateToPool=end_allocate,
                                        _cuda_releasePool=lambda index, pool: self.released.append(pool))

    def _set_stream(self, stream: _Stream) -> None:
        self.current = stream


@pytest.fixture
def fake_torch(monkeypatch: pytest.MonkeyPatch):  # -> a factory of installed _FakeTorch
    def install(end_error: str | None = None) -> _FakeTorch:
        fake = _FakeTorch(end_error)
        monkeypatch.setitem(sys.modules, "torch", fake)
        monkeypatch.setattr(stream_capture, "fresh_stream", lambda device: (_Stream("ours"), True))
        monkeypatch.setattr(stream_capture, "_KEPT", [])
        return fake

    return install


DEVICE = types.SimpleNamespace(type="cuda", index=0)


def test_a_clean_capture_is_discarded_by_reset_and_the_stream_restored(fake_torch) -> None:
    fake = fake_torch()
    seen: list[str] = []
    outcome = stream_capture.capture_forward(lambda inputs: seen.append(fake.current.name), ["x"], DEVICE)
    assert outcome == CaptureOutcome("", "", True)
    assert seen == ["ours"]  # the forward ran with our stream current
    assert fake.current.name == "default" and fake.routing == set() and fake.released == [(0, 7)]
    assert fake.log == ["sync", "begin", "end", "reset"] and stream_capture._KEPT == []


def test_an_unjoined_end_closes_and_releases_the_pool_and_keeps_the_graph(fake_torch) -> None:
    fake = fake_torch(TORCH_UNJOINED)

    def forward(inputs: list[Any]) -> str:
        fake.current = _Stream("the candidate's")  # a forward that leaves another stream current
        return "y"

    outcome = stream_capture.capture_forward(forward, ["x"], DEVICE)
    assert outcome.stage == "end" and is_unjoined(outcome.error) and outcome.fresh_stream
    assert fake.current.name == "default"  # restored
    assert fake.routing == set() and fake.released == [(0, 7)]  # closed by us, released once
    assert len(stream_capture._KEPT) == 1 and fake.log[-1] == "reset"
    assert capture_decision(outcome, ["r"]).finding is not None


def test_a_forward_that_raises_is_recorded_not_raised(fake_torch) -> None:
    fake = fake_torch("CUDA error: operation failed due to a previous error during capture")

    def forward(inputs: list[Any]) -> None:
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    outcome = stream_capture.capture_forward(forward, ["x"], DEVICE)
    assert outcome.stage == "forward" and "not permitted" in outcome.error  # the forward's error, not the end's
    assert fake.current.name == "default" and fake.routing == set() and fake.released == [(0, 7)]
    assert not capture_decision(outcome, []).decided


def test_sys_exit_in_forward_leaves_after_the_capture_is_ended(fake_torch) -> None:
    fake = fake_torch("CUDA error: capturing stream has unjoined work")

    def forward(inputs: list[Any]) -> None:
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        stream_capture.capture_forward(forward, ["x"], DEVICE)
    assert "end" in fake.log and fake.current.name == "default" and fake.routing == set()


def test_a_capture_that_cannot_start_is_undecided(fake_torch) -> None:
    fake = fake_torch()

    def refuse(pool: tuple[int, int], capture_error_mode: str) -> None:
        fake.routing.add(pool)  # torch opens the pool before cudaStreamBeginCapture
        raise RuntimeError("CUDA error: operation not supported")

    original = fake.cuda.CUDAGraph

    class Refusing(original):  # type: ignore[misc, valid-type]
        capture_begin = staticmethod(refuse)

    fake.cuda.CUDAGraph = Refusing
    outcome = stream_capture.capture_forward(lambda inputs: None, ["x"], DEVICE)
    assert outcome.stage == "begin" and "not supported" in outcome.error
    assert fake.current.name == "default" and fake.routing == set() and fake.released == [(0, 7)]
