"""What a Session tells whoever drives it: typed, frozen events in the order things happen.

The TUI turns each event into a message; the headless runner prints them; tests assert on them.
Events carry values (results, replies, text), never live objects, so they may cross threads.
A resumed session first re-emits the events of the steps it loaded from its run folder, each with
`replayed=True`, so a fresh UI can rebuild every pane before new work starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cudaforge.engine.hold import HoldReason
from cudaforge.engine.profiling.analysis import Analysis
from cudaforge.engine.profiling.result import ProfileResult
from cudaforge.engine.results import EvalResult
from cudaforge.engine.session.rulings import Ruling

RoundKind = Literal["seed", "repair", "optimize", "manual"]
Phase = Literal["thinking", "compiling", "verifying", "timing", "profiling", "judging", "waiting", "idle"]
DecisionPoint = Literal["candidate", "recommendation"]
DecisionAction = Literal["approve", "edit", "regenerate", "stop", "branch"]
StopReason = Literal[
    "max_rounds", "target_speedup", "plateau", "budget_dollars", "budget_tokens", "budget_wall",
    "stopped_by_user", "no_candidate", "error", "cancelled", "does_not_fit",
    "unavailable",  # a module the LLM client needs cannot be imported (exit 3)
    "bad_config",  # the provider refused the key or does not know the model (exit 2)
]


@dataclass(frozen=True)
class SessionStarted:
    run_id: str
    run_dir: str
    task_path: str
    mode: str
    rounds: int
    resumed: bool = False
    notice: str = ""  # who receives the code (provider notice), or how to configure one


@dataclass(frozen=True)
class RoundStarted:
    round: int
    kind: RoundKind
    parent: int | None  # the round whose candidate this one builds on (None for a seed)
    replayed: bool = False


@dataclass(frozen=True)
class PhaseChanged:
    round: int
    phase: Phase
    started_at: float  # time.time()
    detail: str = ""


@dataclass(frozen=True)
class BuildOutput:
    """Lines the round's build printed since the last report (ninja's steps, which nvcc prints only as each
    object is done), while the build runs; `started_at` (time.time()) is when the build began."""

    round: int
    lines: tuple[str, ...]
    started_at: float


@dataclass(frozen=True)
class CandidateProposed:
    round: int
    source: str
    format: str
    origin: Literal["coder", "person", "edited"]
    explanation: str = ""
    replayed: bool = False


@dataclass(frozen=True)
class CoderFailed:
    """The Coder gave no usable module (after its own retry); the error is shown, the round waits."""

    round: int
    message: str
    replayed: bool = False


@dataclass(frozen=True)
class CandidateEvaluated:
    round: int
    result: EvalResult
    cached: bool = False
    replayed: bool = False


@dataclass(frozen=True)
class ProfileReady:
    round: int
    profile: ProfileResult
    analysis: Analysis | None  # None without a GPU spec, or when the profile failed
    replayed: bool = False


@dataclass(frozen=True)
class JudgeRecommended:
    round: int
    subject_round: int  # the round whose candidate the recommendation is about
    mode: Literal["correct", "optimize"]
    text: str  # what the Coder will read
    source: Literal["llm", "heuristic", "fallback", "person"]
    replayed: bool = False


@dataclass(frozen=True)
class DecisionNeeded:
    """The session waits: the driver answers with a Decision."""

    round: int
    point: DecisionPoint
    text: str  # the candidate source or the recommendation text
    options: tuple[DecisionAction, ...]


@dataclass(frozen=True)
class DecisionMade:
    round: int
    point: DecisionPoint
    action: DecisionAction
    by: Literal["person", "auto"]
    replayed: bool = False


@dataclass(frozen=True)
class RoundFinished:
    round: int
    kind: RoundKind
    outcome: str  # EvalResult.outcome, or "no_candidate"
    speedup: float | None
    best_round: int | None
    best_speedup: float | None
    replayed: bool = False
    tokens: int = 0  # what the round's LLM calls used, so a UI needs no call log
    cost_usd: float | None = 0.0  # None: a call of the round has no price (unknown, not free)


@dataclass(frozen=True)
class Reverted:
    """The next round builds on the best candidate instead of the last one."""

    round: int  # the round after which the session reverted
    to_round: int
    reason: str


@dataclass(frozen=True)
class UsageUpdated:
    tokens: int
    dollars: float
    cost_known: bool
    calls: int


@dataclass(frozen=True)
class Notice:
    """Something the person should read; errors are values, never tracebacks."""

    level: Literal["info", "warning", "error"]
    text: str


@dataclass(frozen=True)
class ModeChanged:
    mode: str
    reason: str = ""


@dataclass(frozen=True)
class SessionStopped:
    reason: StopReason
    message: str
    best_round: int | None
    best_speedup: float | None
    rounds_done: int
    resumable: bool = True


@dataclass(frozen=True)
class RoundHeld:
    """A passing result is held for review (engine/hold.py): not best, no seed, not fast until accepted."""

    round: int
    reasons: tuple[HoldReason, ...]
    replayed: bool = False


@dataclass(frozen=True)
class RerunFinished:
    """The held candidate evaluated again in a fresh worker process (new seeds, no result cache)."""

    round: int
    result: EvalResult
    replayed: bool = False


@dataclass(frozen=True)
class RulingMade:
    """A person accepted or rejected a held round; `best`/`best_speedup` are the session's after it."""

    ruling: Ruling
    best: int | None = None
    best_speedup: float | None = None
    replayed: bool = False


Event = (
    SessionStarted | RoundStarted | PhaseChanged | BuildOutput | CandidateProposed | CoderFailed | CandidateEvaluated
    | ProfileReady | JudgeRecommended | DecisionNeeded | DecisionMade | RoundFinished | Reverted
    | UsageUpdated | Notice | ModeChanged | SessionStopped | RoundHeld | RerunFinished | RulingMade
)
