"""Work left on a side stream, decided from the dependency structure rather than from clocks (#23).

The timing checks (`hidden_async_work`, `timer_disagreement`) compare clocks; when the driver maps a side
stream and the timed stream onto one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS, or simply a busy
card), the hardware serializes them and every clock sees an honest time. The dependency structure does
not depend on that: the worker runs the candidate's forward once under CUDA stream capture on a fresh
stream (engine/worker/stream_capture.py). A forward that forks a side stream from the calling stream and
returns without joining it back makes the capture end with CUDA's "unjoined" error
(cudaErrorStreamCaptureUnjoined, "capturing stream has unjoined work"): the calling stream provably does
not wait for that work. Any other capture failure (a host sync, `.item()`, an uncapturable API) proves
nothing and is reported as such, never as a failing finding.

The capture runs only with a reason (`capture_reasons`): the static `side_stream` warning, or CUPTI
records of the kernel check's forward showing device work on a stream other than the calling one
(`off_stream_work`). Pure: the standard library and the registry only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from cudaforge.engine.integrity.registry import finding
from cudaforge.engine.results import Finding

# CUDA's name and text for the error (cudaGetErrorString: "capturing stream has unjoined work"); torch puts
# the text in its RuntimeError / AcceleratorError ("CUDA error: capturing stream has unjoined work").
_UNJOINED = re.compile(r"unjoined", re.I)

# Kineto's name of a device-to-device cudaMemcpyAsync: the marker the kernel check issues on the calling
# stream (and waits for) before the candidate's forward, so the calling stream's CUPTI id is known.
MARKER_NAME = "Memcpy DtoD"

UNJOINED_MESSAGE = ("forward left work on a side stream that the calling stream does not wait for "
                    "(stream capture: unjoined)")


class StreamActivity(Protocol):
    """One CUPTI device activity record (engine/worker/kernel_timer.Activity has these fields)."""

    @property
    def start_ns(self) -> int: ...

    @property
    def stream(self) -> int: ...

    @property
    def name(self) -> str: ...


@dataclass(frozen=True)
class StreamUse:
    """Where the kernel check's forward put its device work: the calling stream's CUPTI id (None when the
    marker was not among the records: the stream ids cannot be used) and the names of the activities
    that ran on any other stream."""

    calling_stream: int | None
    off_stream: tuple[str, ...] = ()


def off_stream_work(activities: Iterable[StreamActivity], marker: str = MARKER_NAME) -> StreamUse:
    """The calling stream is the stream of the first marker record (the harness issues it on the calling
    stream and waits for it before calling forward, so it precedes everything forward launched); every
    device activity after it on another stream is work off the calling stream."""
    timeline = sorted(activities, key=lambda a: (a.start_ns, a.stream))
    first = next((a for a in timeline if a.name.startswith(marker)), None)
    if first is None:
        return StreamUse(None)
    off = [a.name for a in timeline if a.start_ns >= first.start_ns and a is not first and a.stream != first.stream]
    return StreamUse(first.stream, tuple(dict.fromkeys(off)))


def capture_reasons(static_side_stream: bool, use: StreamUse | None) -> list[str]:
    """Why the capture check runs ([] : it does not; honest single-stream candidates pay nothing)."""
    reasons = []
    if static_side_stream:
        reasons.append("the source creates or uses a CUDA stream (static side_stream)")
    if use is not None and use.off_stream:
        names = ", ".join(use.off_stream[:3]) + (", ..." if len(use.off_stream) > 3 else "")
        reasons.append(f"CUPTI: device work on a stream other than the calling stream ({names})")
    return reasons


@dataclass(frozen=True)
class CaptureOutcome:
    """What one forward under stream capture did. `stage` is where it stopped: "begin" (the capture could
    not start), "forward" (the forward raised), "end" (the capture did not end cleanly) or "" (it ended
    cleanly); `error` is that exception as one line (type and message, CUDA's hints included)."""

    stage: str
    error: str = ""
    fresh_stream: bool = True  # captured on a stream created for the check (else one of torch's pool)

    @property
    def returned(self) -> bool:
        """The forward returned normally under capture."""
        return self.stage in ("", "end")


@dataclass(frozen=True)
class CaptureDecision:
    """The check's verdict: the failing finding when the work is proven unjoined, else None, and a
    one-line note of what was decided (or why nothing could be)."""

    finding: Finding | None
    note: str
    decided: bool


def is_unjoined(error: str) -> bool:
    """The capture-end error is CUDA's unjoined-work error (and not any other capture failure)."""
    return bool(_UNJOINED.search(error))


def capture_decision(outcome: CaptureOutcome, reasons: Sequence[str]) -> CaptureDecision:
    """From the capture's outcome to a finding. Only a forward that returned normally and whose capture end
    failed with the unjoined error proves work the calling stream does not wait for; a clean end proves
    every fork was joined back; anything else decides nothing."""
    if outcome.stage == "end" and is_unjoined(outcome.error):
        return CaptureDecision(
            finding("hidden_async_work", UNJOINED_MESSAGE,
                    {"check": "stream_capture", "error": outcome.error, "reasons": list(reasons)}),
            "unjoined: the forward forked a side stream from the calling stream and returned without joining it",
            True)
    if outcome.stage == "" and outcome.fresh_stream:
        return CaptureDecision(None, "joined: every stream the forward forked from the calling stream was "
                                     "joined back before it returned", True)
    if outcome.stage == "":  # the candidate may hold that pool stream: a fork from it would be no fork
        return CaptureDecision(None, "undecided: the capture ran on a stream of torch's pool, which the "
                                     "candidate may hold", False)
    where = {"begin": "the capture did not start", "forward": "the forward raised under capture",
             "end": "the capture failed"}.get(outcome.stage, outcome.stage)
    return CaptureDecision(None, f"undecided: {where}" + (f": {outcome.error}" if outcome.error else ""), False)


def undecided_finding(decision: CaptureDecision, reasons: Sequence[str]) -> Finding | None:
    """`stream_capture_skipped` (info) where the check ran and could not decide: the timing checks alone
    judge this candidate's side streams."""
    if decision.decided:
        return None
    return finding("stream_capture_skipped",
                   f"the side-stream check (one forward under CUDA stream capture) could not decide: "
                   f"{decision.note.removeprefix('undecided: ')}",
                   {"check": "stream_capture", "note": decision.note, "reasons": list(reasons)})


def fold_hidden_work(findings: Sequence[Finding]) -> list[Finding]:
    """One `hidden_async_work` where both the stream capture and the clocks found it (the result's message
    names each failing finding once): the capture's, with the clocks' message appended and their evidence
    under "timing"."""
    captured = next((f for f in findings if f.name == "hidden_async_work"
                     and f.evidence.get("check") == "stream_capture"), None)
    timed = next((f for f in findings if f.name == "hidden_async_work" and f is not captured), None)
    if captured is None or timed is None:
        return list(findings)
    folded = replace(captured, message=f"{captured.message}; {timed.message}",
                     evidence={**captured.evidence, "timing": dict(timed.evidence)})
    return [folded if f is captured else f for f in findings if f is not timed]
