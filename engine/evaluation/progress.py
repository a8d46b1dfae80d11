"""What an evaluation is doing while it runs: the worker's phase and the lines its build printed so far.

The worker runs sandboxed and reports through files only: its progress file (the phase and when it
began, rewritten before each phase) and its build log (ninja's output, streamed as it comes; see
`worker.harness.BuildRecorder`). `watch` tails both while the worker runs and hands each change to a
callback as a typed `EvalProgress`; the Session turns those into events and `cudaforge eval` into its
progress line (`PhaseLine`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from cudaforge.engine.worker.job import build_log_beside

POLL_S = 0.25
MAX_LINE = 400  # a build line longer than this is cut (long compiler command lines)


@dataclass(frozen=True)
class EvalProgress:
    """One change seen in a running evaluation: the worker's phase (its name in the worker: build,
    correctness, timing, ...), when that phase began (time.time()), and the build lines printed since
    the previous report (empty when only the phase changed)."""

    phase: str
    since: float
    build_lines: tuple[str, ...] = ()


ProgressHook = Callable[[EvalProgress], None]


def read_phase(progress_path: Path) -> tuple[str, float] | None:
    """(phase, since) from a worker's progress file; None while it has none (or mid-rewrite)."""
    try:
        data = json.loads(progress_path.read_text())
        return str(data["phase"]), float(data["since"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


class _Tail:
    """The complete lines appended to a file since the last read (a partial last line waits)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def read(self) -> list[str]:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return []
        self.offset += len(data)
        chunks = (self.partial + data).split(b"\n")
        self.partial = chunks.pop()
        return [c.decode("utf-8", "replace").rstrip("\r")[:MAX_LINE] for c in chunks]


async def watch(progress_path: Path, hook: ProgressHook, poll_s: float = POLL_S) -> None:
    """Report every phase change and new build line of the worker behind `progress_path` until cancelled.
    A hook that raises is not the evaluation's problem: its error is dropped."""
    tail = _Tail(Path(build_log_beside(str(progress_path))))
    last: list[tuple[str, float] | None] = [None]

    def report() -> None:
        current = read_phase(progress_path)
        lines = tuple(tail.read())
        if current is not None and (current != last[0] or lines):
            last[0] = current
            with contextlib.suppress(Exception):  # a display problem must not fail an evaluation
                hook(EvalProgress(current[0], current[1], lines))

    try:
        while True:
            report()
            await asyncio.sleep(poll_s)
    except asyncio.CancelledError:
        report()  # the lines the build printed since the last poll
        raise


# Phases as a person names them; the worker's own steps in between (init, kernels, ...) count as
# the step they belong to.
PHASE_LABELS = {"start": "starting", "warm": "starting", "idle": "starting", "load_task": "loading the task", "build": "build",
                "init": "build", "context_wait": "waiting for the GPU", "context": "starting",
                "gpu_wait": "waiting for the GPU", "place": "correctness", "reference": "correctness",
                "fallback": "correctness", "cache_probes": "correctness", "correctness": "correctness",
                "kernels": "correctness", "timing": "timing", "compile_baseline": "timing", "shapes": "correctness",
                "profile": "profile", "done": "done"}


def phase_label(phase: str) -> str:
    return PHASE_LABELS.get(phase, phase)


class PhaseLine:
    """`cudaforge eval`'s progress on stderr: the phase in progress with its time so far. On a terminal
    one line rewritten in place (every `tick`); elsewhere one plain line per phase."""

    def __init__(self, stream: TextIO | None = None, clock: Callable[[], float] = time.time) -> None:
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.clock = clock
        self.label = ""
        self.since = 0.0
        self.drawn = False

    def update(self, progress: EvalProgress) -> None:
        label = phase_label(progress.phase)
        if label == self.label or label == "done":
            return
        if self.label and not self.tty:
            self.stream.write(f"  {self.label}: {self.clock() - self.since:.1f} s\n")
        self.label, self.since = label, progress.since
        if not self.tty:
            self.stream.write(f"  {label} …\n")
            self.stream.flush()
        self.tick()

    def tick(self) -> None:
        if not self.tty or not self.label:
            return
        self.stream.write(f"\r  {self.label} {self.clock() - self.since:.0f} s\x1b[K")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        """End the line (the result is printed after it)."""
        if self.tty and self.drawn:
            self.stream.write(f"\r  {self.label} {self.clock() - self.since:.1f} s\x1b[K\n")
        elif self.label and not self.tty:
            self.stream.write(f"  {self.label}: {self.clock() - self.since:.1f} s\n")
        self.stream.flush()
        self.label = ""
