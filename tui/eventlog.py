"""What the session log says for each engine event: text only, no widgets (the App writes the lines)."""

from __future__ import annotations

from dataclasses import dataclass

from cudaforge.engine.session import (
    CandidateEvaluated,
    DecisionNeeded,
    Event,
    Notice,
    Reverted,
    RoundHeld,
    RoundStarted,
    RulingMade,
    SessionStarted,
    SessionStopped,
)
from cudaforge.tui.format import fmt_speedup

QUIET_STOPS = ("max_rounds", "target_speedup", "plateau")  # the session ended as planned: info, not warning


@dataclass(frozen=True)
class LogEntry:
    text: str
    level: str = "info"  # info | warning | error (the LogPane's levels)


def log_entries(event: Event, run_dir: str) -> tuple[LogEntry, ...]:
    """The log lines for `event`; `run_dir` is the run folder once known (for the resume hint)."""
    match event:
        case SessionStarted():
            started = LogEntry(f"session {event.run_id} in {event.run_dir} ({event.mode} mode, {event.rounds} rounds)"
                               + (", resumed" if event.resumed else ""))
            return (started, LogEntry(event.notice)) if event.notice else (started,)
        case RoundStarted() if not event.replayed:
            return (LogEntry(f"round {event.round}: {event.kind}"
                             + (f", building on round {event.parent}" if event.parent is not None else "")),)
        case DecisionNeeded():
            return (LogEntry(f"round {event.round} waits for a decision on the {event.point}"),)
        case CandidateEvaluated() if not event.replayed:
            r = event.result
            return (LogEntry(f"round {event.round}: {r.outcome}" + (f", {fmt_speedup(r.speedup)}" if r.accepted else "")
                             + (f" — {r.message}" if r.message and not r.accepted else "")
                             + (" (cached result)" if event.cached else ""),
                             "info" if r.accepted else "warning"),)
        case Reverted():
            return (LogEntry(f"next round builds on round {event.to_round}: {event.reason}", "warning"),)
        case RoundHeld() if not event.replayed:
            return (LogEntry(f"round {event.round} is held for review: " + "; ".join(r.message for r in event.reasons),
                             "warning"),)
        case RulingMade() if not event.replayed:
            ruling = event.ruling
            return (LogEntry(f"round {ruling.round}: {ruling.ruling}ed by {ruling.who}"
                             + (f" ({ruling.reason})" if ruling.reason else "")),)
        case Notice():
            return (LogEntry(event.text, event.level),)
        case SessionStopped():
            stopped = LogEntry(f"session stopped ({event.reason}): {event.message}",
                               "info" if event.reason in QUIET_STOPS else "warning")
            if event.resumable and run_dir:
                return stopped, LogEntry(f"resume with: cudaforge-tui --resume {run_dir}")
            return (stopped,)
        case _:
            return ()
