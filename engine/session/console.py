"""Headless front end of a session: a progress display on stderr and a terminal decision prompt.

On a terminal the display keeps one status line (round, phase, best speedup, tokens, dollars,
elapsed) and prints a line per finished step above it; piped, it prints the lines only.
"""

from __future__ import annotations

import asyncio
import io
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

from cudaforge.engine.llm.prices import format_cost
from cudaforge.engine.session.decisions import Decision
from cudaforge.engine.session.events import (
    CandidateEvaluated,
    CandidateProposed,
    CoderFailed,
    DecisionNeeded,
    Event,
    JudgeRecommended,
    ModeChanged,
    Notice,
    PhaseChanged,
    ProfileReady,
    Reverted,
    RoundFinished,
    RoundStarted,
    SessionStarted,
    SessionStopped,
    UsageUpdated,
)

SESSION_LOG = "session.log"  # in the run folder: "YYYY-MM-DDTHH:MM:SS  text", one line per progress line


class SessionLog:
    """The session's log kept in its run folder (session.log): the lines the progress display prints,
    each with its local wall-clock time, appended as they happen, so a run opened later (`--open`)
    shows what happened. Replayed steps of a resumed run add nothing (they were logged the first time)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lines = ProgressDisplay(io.StringIO(), live=False)

    def __call__(self, event: Event) -> None:
        line = self._lines.line_for(event)
        if not line:
            return
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write("".join(f"{stamp}  {part}\n" for part in line.splitlines()))


def read_session_log(run_dir: str | Path) -> list[str]:
    """The lines of a run's session log ([] for a run without one, e.g. from an older version)."""
    try:
        return (Path(run_dir) / SESSION_LOG).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []


class ProgressDisplay:
    def __init__(self, stream: TextIO | None = None, *, prefix: str = "", live: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.prefix = prefix
        self.live = self.stream.isatty() if live is None else live
        self.round = 0
        self.rounds = 0
        self.phase = "starting"
        self.phase_since = time.time()
        self.best: float | None = None
        self.tokens = 0
        self.dollars = 0.0
        self.cost_known = True
        self.started = time.time()

    def __call__(self, event: Event) -> None:
        line = self.line_for(event)
        if line:
            self._print(line)
        elif self.live:
            self._status()

    def line_for(self, e: Event) -> str | None:
        match e:
            case SessionStarted():
                self.rounds = e.rounds
                verb = "resuming" if e.resumed else "started"
                return f"{verb} run {e.run_id} ({e.mode} mode) in {e.run_dir}" + (f"\n  {e.notice}" if e.notice else "")
            case RoundStarted(replayed=False):
                self.round = e.round
                parent = f" from round {e.parent}" if e.parent is not None else ""
                return f"round {e.round}: {e.kind}{parent}"
            case RoundStarted():
                self.round = e.round
                return None
            case PhaseChanged():
                self.phase, self.phase_since = e.phase, e.started_at
                return None
            case JudgeRecommended(replayed=False):
                first = e.text.strip().splitlines()[0] if e.text.strip() else ""
                return f"  judge ({e.source}, {e.mode}) on round {e.subject_round}: {first[:100]}"
            case CandidateProposed(replayed=False):
                return f"  candidate ({e.format}, {e.origin}, {len(e.source.splitlines())} lines)"
            case CoderFailed(replayed=False):
                return f"  coder failed: {e.message}"
            case CandidateEvaluated(replayed=False):
                r = e.result
                cached = " (cached)" if e.cached else ""
                return f"  evaluated{cached}: {r.outcome}: {r.message}"
            case ProfileReady(replayed=False):
                n = len(e.profile.kernels)
                return f"  profiled: {n} kernel(s)" + ("" if e.profile.ok else f" ({e.profile.message})")
            case Reverted():
                return f"  revert: next round builds on round {e.to_round} ({e.reason})"
            case RoundFinished():
                self.best = e.best_speedup
                return None
            case UsageUpdated():
                self.tokens, self.dollars, self.cost_known = e.tokens, e.dollars, e.cost_known
                return None
            case ModeChanged():
                return f"mode: {e.mode} ({e.reason})"
            case Notice():
                return f"{e.level}: {e.text}"
            case SessionStopped():
                best = f"{e.best_speedup:.2f}x (round {e.best_round})" if e.best_speedup is not None else \
                    f"round {e.best_round} (no speed claim)" if e.best_round is not None else "none"
                return f"stopped: {e.message}; best {best}"
        return None

    def _status_text(self) -> str:
        best = f"{self.best:.2f}x" if self.best is not None else "-"
        return (f"{self.prefix}round {self.round}/{self.rounds}  {self.phase} {time.time() - self.phase_since:4.0f}s  "
                f"best {best}  tokens {self.tokens}  {format_cost(self.dollars, self.cost_known)}  elapsed {time.time() - self.started:5.0f}s")

    def _status(self) -> None:
        self.stream.write("\r\x1b[2K" + self._status_text())
        self.stream.flush()

    def _print(self, line: str) -> None:
        if self.live:
            self.stream.write("\r\x1b[2K")
        for part in line.splitlines():
            self.stream.write(f"{self.prefix}{part}\n")
        if self.live:
            self.stream.write(self._status_text())
        self.stream.flush()


class TerminalDriver:
    """Review mode in a terminal: show what waits, read a letter; edit opens $VISUAL/$EDITOR."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr

    async def decide(self, request: DecisionNeeded) -> Decision:
        keys = {"approve": "a", "edit": "e", "regenerate": "r", "stop": "s", "branch": "b"}
        menu = " / ".join(f"[{keys[o]}]{o[1:] if keys[o] == o[0] else ' ' + o}" for o in request.options)
        what = "candidate" if request.point == "candidate" else "Judge recommendation"
        body = request.text if request.point == "recommendation" else _excerpt(request.text)
        self.stream.write(f"\n--- round {request.round}: {what} ---\n{body}\n{menu}? ")
        self.stream.flush()
        while True:
            answer = (await asyncio.to_thread(sys.stdin.readline)).strip().lower()
            if not answer and not sys.stdin.isatty():
                return Decision("stop")  # stdin closed: nobody there to decide
            chosen = next((o for o in request.options if keys[o] == answer[:1]), None)
            if chosen == "edit":
                text = await asyncio.to_thread(edit_text, request.text,
                                               ".py" if request.point == "candidate" else ".md")
                return Decision("edit", text=text)
            if chosen == "branch":
                self.stream.write("branch from round: ")
                self.stream.flush()
                num = (await asyncio.to_thread(sys.stdin.readline)).strip()
                if num.isdigit():
                    return Decision("branch", round=int(num))
                continue
            if chosen is not None:
                return Decision(chosen)  # type: ignore[arg-type]
            self.stream.write(f"{menu}? ")
            self.stream.flush()


def _excerpt(source: str, lines: int = 40) -> str:
    all_lines = source.splitlines()
    if len(all_lines) <= lines:
        return source
    return "\n".join(all_lines[:lines]) + f"\n... ({len(all_lines) - lines} more lines)"


def edit_text(text: str, suffix: str) -> str:
    """Open text in $VISUAL/$EDITOR (vi if neither) and return what was saved."""
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    with tempfile.TemporaryDirectory(prefix="cudaforge-edit-") as tmp:
        path = Path(tmp) / f"edit{suffix}"
        path.write_text(text, encoding="utf-8")
        subprocess.run([*shlex.split(editor), str(path)], check=False)
        return path.read_text(encoding="utf-8")
