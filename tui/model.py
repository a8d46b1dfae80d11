"""The UI's picture of a run: rounds, totals and the live phase, built from engine events or a run folder.

Widgets never read engine objects directly; the App folds every event into a RunModel (pure data,
no Textual) and then asks each pane to show the selected round from it. The same model is filled
from `RunStore.rounds()` for a read-only `--open`, so browsing and live sessions render alike.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from cudaforge.engine.hold import HoldReason
from cudaforge.engine.profiling import ProfileResult
from cudaforge.engine.profiling.analysis import Analysis
from cudaforge.engine.results import EvalResult
from cudaforge.engine.session import (
    BuildOutput,
    CandidateEvaluated,
    CandidateProposed,
    CoderFailed,
    DecisionMade,
    DecisionNeeded,
    Event,
    JudgeRecommended,
    ModeChanged,
    PhaseChanged,
    ProfileReady,
    RerunFinished,
    RoundFinished,
    RoundHeld,
    RoundRecord,
    RoundStarted,
    RulingMade,
    SessionStarted,
    SessionStopped,
    UsageUpdated,
    round_status,
)
from cudaforge.engine.session.rulings import Ruling

BUSY_PHASES = ("thinking", "compiling", "verifying", "timing", "profiling", "judging")


@dataclass
class RoundView:
    """What the panes show about one round; mutable because events fill it step by step."""

    round: int
    kind: str = "?"
    parent: int | None = None
    finished: bool = False
    candidate: str | None = None  # the approved candidate, or the draft waiting for a decision
    candidate_is_draft: bool = False
    format: str = ""
    origin: str = ""
    explanation: str = ""
    coder_error: str | None = None
    result: EvalResult | None = None
    profile: ProfileResult | None = None
    analysis: Analysis | None = None
    recommendation: str | None = None  # what the Judge said about the parent round (this round's input)
    judge_source: str = ""
    judge_mode: str = ""
    subject_round: int | None = None
    outcome: str = ""
    cost_usd: float | None = 0.0  # None: unknown (a call has no price)
    tokens: int = 0
    hold: tuple[HoldReason, ...] = ()  # why the result is held for review (engine/hold.py)
    rerun: EvalResult | None = None  # the held candidate's re-run in a fresh worker
    ruling: Ruling | None = None
    build_lines: list[str] = field(default_factory=list)  # what the build printed so far (while it runs)
    build_started: float | None = None  # time.time() the build began, while the round is evaluated
    abandoned: bool = False  # unfinished in a run that is no longer running (a cancelled round)

    @property
    def speedup(self) -> float | None:
        r = self.result
        return r.speedup if r is not None and r.accepted else None

    @property
    def sol_fraction(self) -> float | None:
        r = self.result
        return r.sol_fraction if r is not None and r.accepted else None

    @property
    def hold_label(self) -> str:
        """'held', 'accepted' or 'rejected' for a round that was held; '' otherwise."""
        if not self.hold:
            return ""
        return "held" if self.ruling is None else f"{self.ruling.ruling}ed"

    @property
    def counts(self) -> bool:
        """Accepted and not held back (engine RoundRecord.counts)."""
        return self.speedup is not None and (not self.hold or self.hold_label == "accepted")

    @property
    def status(self) -> str:
        status = round_status(self.result, coder_error=self.coder_error, finished=self.finished, outcome=self.outcome)
        return "stopped" if status == "running" and self.abandoned else status

    @classmethod
    def from_record(cls, rec: RoundRecord) -> RoundView:
        return cls(
            round=rec.round, kind=rec.kind, parent=rec.parent, finished=rec.finished, candidate=rec.candidate,
            format=rec.format or "", origin=rec.origin or "", explanation=rec.explanation,
            coder_error=rec.coder_error, result=rec.result, profile=rec.profile, analysis=rec.analysis,
            recommendation=rec.recommendation, judge_source=rec.judge_source or "", judge_mode=rec.judge_mode or "",
            subject_round=rec.subject_round, outcome=rec.outcome if rec.finished else "",
            cost_usd=rec.cost_usd, tokens=rec.tokens, hold=rec.hold, rerun=rec.rerun, ruling=rec.ruling,
        )


@dataclass
class RunModel:
    """Everything the App knows about the run it shows."""

    run_id: str = ""
    run_dir: str = ""
    task_path: str = ""
    mode: str = ""
    total_rounds: int = 0
    read_only: bool = False
    rounds: dict[int, RoundView] = field(default_factory=dict)
    best_round: int | None = None
    best_speedup: float | None = None
    tokens: int = 0
    dollars: float = 0.0
    cost_known: bool = True
    calls: int = 0
    phase: str = "idle"
    phase_round: int | None = None
    phase_started: float = 0.0
    phase_detail: str = ""  # the worker's own step (build, correctness, ...) while a round is evaluated
    current_round: int | None = None
    pending: DecisionNeeded | None = None  # the one place the waiting request lives; None once answered
    stopped: SessionStopped | None = None
    gpu_name: str = ""
    run_status: str = ""  # a browsed run's status as its state says (running, stopped, finished, ...)

    # ---- reading ---------------------------------------------------------------------------------
    def get(self, n: int | None) -> RoundView | None:
        return self.rounds.get(n) if n is not None else None

    def ensure(self, n: int) -> RoundView:
        if n not in self.rounds:
            self.rounds[n] = RoundView(n)
        return self.rounds[n]

    def latest(self) -> int | None:
        return max(self.rounds) if self.rounds else None

    def speedups(self) -> list[tuple[int, float | None, str]]:
        """(round, speedup or None, status) in round order, for the chart."""
        return [(n, v.speedup, v.status) for n, v in sorted(self.rounds.items())]

    def chart_notes(self) -> dict[int, str]:
        """Per round: its % of speed of light and whether it is held, beside its bar in the chart."""
        notes = {}
        for n, v in self.rounds.items():
            parts = [f"{v.sol_fraction:.0%} SOL"] if v.sol_fraction is not None else []
            if v.hold_label:
                parts.append(v.hold_label)
            if parts:
                notes[n] = " ".join(parts)
        return notes

    def held(self) -> list[int]:
        """Rounds held for review without a ruling."""
        return [n for n, v in sorted(self.rounds.items()) if v.hold_label == "held"]

    @property
    def busy(self) -> bool:
        """A step is in flight whose work quitting would discard."""
        return self.stopped is None and self.pending is None and self.phase in BUSY_PHASES

    # ---- folding events --------------------------------------------------------------------------
    def apply(self, event: Event) -> set[int]:
        """Fold one engine event in; returns the rounds whose panes must be redrawn."""
        changed: set[int] = set()
        match event:
            case SessionStarted():
                self.run_id, self.run_dir, self.task_path = event.run_id, event.run_dir, event.task_path
                self.mode, self.total_rounds = event.mode, event.rounds
                self.stopped = None
            case RoundStarted():
                view = self.ensure(event.round)
                view.kind, view.parent = event.kind, event.parent
                self.current_round = event.round
                changed.add(event.round)
            case PhaseChanged():
                self.phase, self.phase_round = event.phase, event.round
                self.phase_started, self.phase_detail = event.started_at, event.detail
                if event.detail == "build":
                    self.ensure(event.round).build_started = event.started_at
                    changed.add(event.round)
            case BuildOutput():
                view = self.ensure(event.round)
                if view.build_started != event.started_at:  # a new build of the round: its own lines
                    view.build_started, view.build_lines = event.started_at, []
                view.build_lines.extend(event.lines)
                changed.add(event.round)
            case CandidateProposed():
                view = self.ensure(event.round)
                view.candidate, view.format, view.origin = event.source, event.format, event.origin
                view.explanation = event.explanation
                view.coder_error = None
                # a coder draft is waiting for a decision until the round's evaluation says otherwise
                view.candidate_is_draft = event.origin == "coder" and not event.replayed
                changed.add(event.round)
            case CoderFailed():
                view = self.ensure(event.round)
                view.coder_error = event.message
                changed.add(event.round)
            case CandidateEvaluated():
                view = self.ensure(event.round)
                view.result = event.result
                view.candidate_is_draft = False
                if event.result.gpu_name:
                    self.gpu_name = event.result.gpu_name
                changed.add(event.round)
            case ProfileReady():
                view = self.ensure(event.round)
                view.profile, view.analysis = event.profile, event.analysis
                changed.add(event.round)
            case JudgeRecommended():
                view = self.ensure(event.round)
                view.recommendation, view.judge_source = event.text, event.source
                view.judge_mode, view.subject_round = event.mode, event.subject_round
                changed.add(event.round)
            case DecisionNeeded():
                self.pending = event
                self.phase, self.phase_round, self.phase_started = "waiting", event.round, time.time()
                if event.point == "candidate":
                    view = self.ensure(event.round)
                    if event.text:
                        view.candidate = event.text
                    view.candidate_is_draft = True
                changed.add(event.round)
            case DecisionMade():
                if not event.replayed and self.phase == "waiting" and self.phase_round == event.round:
                    self.pending = None
                    self.phase = "idle"
                if event.point == "candidate" and event.action in ("approve", "edit"):
                    self.ensure(event.round).candidate_is_draft = False
                changed.add(event.round)
            case RoundFinished():
                view = self.ensure(event.round)
                view.finished, view.outcome, view.kind = True, event.outcome, event.kind
                view.tokens, view.cost_usd = event.tokens, event.cost_usd
                view.candidate_is_draft = False
                self.best_round, self.best_speedup = event.best_round, event.best_speedup
                changed.add(event.round)
            case RoundHeld():
                self.ensure(event.round).hold = event.reasons
                changed.add(event.round)
            case RerunFinished():
                self.ensure(event.round).rerun = event.result
                changed.add(event.round)
            case RulingMade():
                self.ensure(event.ruling.round).ruling = event.ruling
                self.best_round, self.best_speedup = event.best, event.best_speedup
                changed.add(event.ruling.round)
            case UsageUpdated():
                self.tokens, self.dollars, self.cost_known, self.calls = (event.tokens, event.dollars,
                                                                          event.cost_known, event.calls)
            case ModeChanged():
                self.mode = event.mode
            case SessionStopped():
                self.stopped = event
                self.pending = None
                self.phase = "idle"
                self.best_round, self.best_speedup = event.best_round, event.best_speedup
        return changed

    def answered(self) -> None:
        """The person answered the waiting request: it is no longer pending (the engine goes on)."""
        self.pending = None

    def load_state(self, status: str, best_round: int | None, best_speedup: float | None,
                   rounds_done: int | None, configured_rounds: int) -> None:
        """A browsed run as its session wrote it down: the state's status, best round and round count
        are the truth (a best recomputed from the rounds would crown a round the session did not); a
        round left unfinished by a run that is not running was stopped, not running."""
        self.run_status = status
        if status != "running":
            for view in self.rounds.values():
                view.abandoned = not view.finished
        if best_round is not None or best_speedup is not None:
            self.best_round, self.best_speedup = best_round, best_speedup
        finished = sum(1 for v in self.rounds.values() if v.finished)
        done = rounds_done if rounds_done is not None else finished
        self.current_round = done or None
        self.total_rounds = max(configured_rounds, done)

    def load_records(self, records: list[RoundRecord]) -> None:
        """Fill the rounds from a run folder (read-only browsing, or costs of a resumed run)."""
        for rec in records:
            self.rounds[rec.round] = RoundView.from_record(rec)
        best = [(v.speedup, n) for n, v in self.rounds.items() if v.speedup is not None and v.counts]
        if best:
            self.best_speedup, self.best_round = max(best)
