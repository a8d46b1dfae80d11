"""The run folder's records as typed dataclasses (engine/session/store.py writes and reads them).

Each has `to_dict` / `from_dict` like `engine/worker/job.py`. `from_dict` is tolerant: a key this version does not
know is ignored and a missing one takes its default, so run folders written by older versions still open. The
status of a round is decided here, once (`round_status`), for the run folder and the workbench alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from cudaforge.engine.results import EvalResult, from_dict, to_dict
from cudaforge.engine.session.decisions import Decision

SCHEMA_VERSION = 1

_R = TypeVar("_R")


class _Record:
    """to_dict / from_dict for a record dataclass."""

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    @classmethod
    def from_dict(cls: type[_R], data: Any) -> _R:
        return from_dict(cls, data if isinstance(data, dict) else {})

    @classmethod
    def keys(cls) -> frozenset[str]:
        return frozenset(f.name for f in fields(cls))  # type: ignore[arg-type]


@dataclass(frozen=True)
class GpuInfo(_Record):
    """Where the run evaluates: the CPU, or a CUDA device (index, the card's spec name and chip)."""

    device: str = ""
    index: int | None = None
    name: str | None = None
    chip: str | None = None

    @property
    def shown(self) -> str:
        """How the workbench names it: the card's name, or CPU."""
        return self.name or ("CPU" if self.device == "cpu" else "")


@dataclass(frozen=True)
class Manifest(_Record):
    """manifest.json: written once when the run starts."""

    run_id: str = ""
    schema: int | None = None
    created: float = 0.0
    task_path: str = ""  # the file the run was started from (the run evaluates its copy, task.py)
    task_name: str = ""
    task_sha256: str = ""
    mode: str = ""
    config: dict[str, Any] = field(default_factory=dict)  # the merged configuration (config_to_data)
    gpu: GpuInfo | None = None
    versions: dict[str, Any] = field(default_factory=dict)

    @property
    def rounds_limit(self) -> int:
        """[session] rounds as the run started (0 when not recorded)."""
        return int((self.config.get("session") or {}).get("rounds") or 0)


@dataclass(frozen=True)
class State(_Record):
    """state.json: rewritten as the run goes (status, stop, best round, time spent)."""

    status: str = "running"  # running | stopped | finished (a "running" run no process holds is interrupted)
    mode: str = ""
    stop_reason: str | None = None
    stop_message: str | None = None
    best_round: int | None = None
    best_speedup: float | None = None
    rounds_done: int = 0
    active_s: float = 0.0
    updated: float = 0.0
    max_rounds: int | None = None  # the session's round limit, as the session last ran
    cancelled_round: int | None = None  # a round started but not finished when the session stopped


@dataclass(frozen=True)
class RoundMeta(_Record):
    """rounds/NNN/round.json: the round's kind and parent; on finishing, its outcome and the bookkeeping."""

    round: int = 0
    kind: str = "?"
    parent: int | None = None
    started_at: float = 0.0
    finished: bool = False
    finished_at: float | None = None
    outcome: str | None = None
    speedup: float | None = None
    repeat_of: int | None = None  # an earlier round whose candidate this one repeats exactly
    progress: dict[str, Any] | None = None  # the session's best/head/failure counters after the round


@dataclass(frozen=True)
class CandidateMeta(_Record):
    """rounds/NNN/candidate.json, beside candidate.py: its format and who wrote it."""

    format: str | None = None
    origin: str | None = None  # coder | edited | person
    explanation: str = ""


@dataclass(frozen=True)
class CoderDraft(_Record):
    """rounds/NNN/coder-K.json: the K-th Coder reply of the round (a CoderReply's dict)."""

    purpose: str = ""
    source: str | None = None  # the module, or None when the reply had none usable
    text: str = ""
    explanation: str = ""
    error: dict[str, Any] | None = None  # the LLM error (kind, message, status, provider, model)
    records: tuple[dict[str, Any], ...] = ()  # the calls behind the reply (CallRecord dicts)
    prompt: dict[str, Any] | None = None

    @property
    def error_kind(self) -> str | None:
        return (self.error or {}).get("kind")

    @property
    def error_message(self) -> str | None:
        return (self.error or {}).get("message")


@dataclass(frozen=True)
class JudgeDraft(_Record):
    """rounds/NNN/judge-K.json: the K-th Judge recommendation of the round, about `subject_round`."""

    subject_round: int | None = None
    mode: str = ""  # correct | optimize
    text: str = ""
    source: str = ""  # llm | fallback | heuristic
    reply: dict[str, Any] = field(default_factory=dict)  # the JudgeReply's dict

    @property
    def records(self) -> tuple[dict[str, Any], ...]:
        return tuple(self.reply.get("records") or ())


@dataclass(frozen=True)
class Recommendation(_Record):
    """rounds/NNN/recommendation.json: what goes to this round's Coder (maybe edited by the person)."""

    text: str | None = None
    source: str | None = None  # llm | fallback | heuristic | person
    mode: str | None = None
    subject_round: int | None = None
    draft: int | None = None  # the judge-K draft it came from


@dataclass(frozen=True)
class DecisionEntry(_Record):
    """One entry of rounds/NNN/decisions.json: a decision at one of the round's decision points, in order."""

    point: str = "candidate"  # candidate | recommendation
    n: int = 0  # the draft it answered (coder-K / judge-K)
    by: str = "person"  # person | auto
    action: str = "approve"
    text: str | None = None  # the edited candidate or recommendation
    round: int | None = None  # the round to branch from
    at: float = 0.0

    @property
    def decision(self) -> Decision:
        return Decision.from_dict({"action": self.action, "text": self.text, "round": self.round})


def round_status(result: EvalResult | None, *, coder_error: str | None, finished: bool, outcome: str = "") -> str:
    """A round's status: the outcome it finished with (when told), else its evaluation's outcome; without one,
    no_candidate once the Coder failed or the round finished, else running."""
    if outcome:
        return outcome
    if result is not None:
        return result.outcome
    if coder_error or finished:
        return "no_candidate"
    return "running"
