"""Values that flow out of an LLM call: usage, the reply, the error value and the call record.

All frozen dataclasses with `to_dict`, so a session can store them in the run folder as JSON and
hand them to the UI across threads. None of them ever holds an API key.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

Role = Literal["user", "assistant"]

ErrorKind = Literal[
    "rate_limited",  # 429 after the SDK's own retries
    "server_error",  # 5xx / overloaded after the SDK's own retries
    "timeout",
    "connection",
    "bad_request",  # 400/404/413/422: the request itself is wrong (model name, limits)
    "auth",  # 401/403 or a missing key
    "not_found",  # 404: an unknown model (or a wrong base URL)
    "not_installed",  # the provider's SDK cannot be imported
    "truncated",  # the reply hit max_output_tokens
    "refused",  # content filter / model refusal
    "no_module",  # the Coder's reply held no usable ModelNew module (after one retry)
    "budget",  # the session's dollar cap was reached before this call
    "cancelled",
    "unknown",
]


# Failures the next call would meet again, whatever it asks: a session ends at the first one, with
# its fix, instead of spending round after round on it. Values are the process exit codes
# (3: a needed module is unavailable; 2: bad configuration).
REPEATING_ERRORS: dict[str, int] = {"not_installed": 3, "auth": 2, "not_found": 2}


@dataclass(frozen=True)
class Message:
    """One turn of a conversation; the system prompt travels separately."""

    role: Role
    content: str

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class Usage:
    """Token counts of one call, normalised across providers.

    `input_tokens` is the whole prompt, including `cached_input_tokens` (read from the cache) and
    `cache_write_tokens`; `output_tokens` is everything billed as output, including
    `reasoning_tokens` (thinking), which is a subset reported for information only.
    """

    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int | None = None

    @property
    def uncached_input_tokens(self) -> int:
        return max(0, self.input_tokens - self.cached_input_tokens - self.cache_write_tokens)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        if self.reasoning_tokens is None and other.reasoning_tokens is None:
            reasoning = None
        else:
            reasoning = (self.reasoning_tokens or 0) + (other.reasoning_tokens or 0)
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            reasoning_tokens=reasoning,
        )

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Usage:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class LLMReply:
    """A completed call. `cost_usd` is None when the model has no price sheet (unknown, not free)."""

    text: str
    usage: Usage
    cost_usd: float | None
    latency_s: float
    finish_reason: str  # "stop", or the provider's own word for anything else
    provider: str
    model: str  # the model the server says answered
    thinking: str = ""  # reasoning text where the provider returns it
    request: dict[str, Any] = field(default_factory=dict)  # what was sent, minus credentials
    response: dict[str, Any] = field(default_factory=dict)  # the provider's reply as JSON
    notes: tuple[str, ...] = ()  # adjustments made to the request (dropped temperature, ...)

    @property
    def ok(self) -> bool:
        return True

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["usage"] = self.usage.to_dict()
        data["notes"] = list(self.notes)
        return data


@dataclass(frozen=True)
class LLMError:
    """A failed call as a value the session turns into an event; never raised at the caller.

    `usage`/`cost_usd` are set when tokens were still billed (a truncated reply).
    """

    kind: ErrorKind
    message: str
    provider: str = ""
    model: str = ""
    status: int | None = None
    latency_s: float = 0.0
    partial_text: str = ""
    usage: Usage | None = None
    cost_usd: float | None = None
    request: dict[str, Any] = field(default_factory=dict)
    response: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return False

    @property
    def repeats(self) -> bool:
        """True when every later call would fail the same way (see REPEATING_ERRORS)."""
        return self.kind in REPEATING_ERRORS

    def one_line(self) -> str:
        """For event lines and logs: kind, status and message on one line."""
        status = f" {self.status}" if self.status else ""
        first = self.message.strip().splitlines()[0] if self.message.strip() else ""
        return f"{self.kind}{status}: {first}"

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["usage"] = self.usage.to_dict() if self.usage else None
        return data


LLMResult = LLMReply | LLMError


@dataclass(frozen=True)
class CallRecord:
    """One prompt and its reply (or error), kept as data for the run folder's transcript."""

    call_id: str
    agent: str  # "coder" or "judge"
    purpose: str  # "seed", "repair", "optimize", "correct", ... plus "/retry" on a retry
    round: int | None
    attempt: int
    provider: str
    model: str
    started_at: float  # time.time() when the call began
    latency_s: float
    system: str
    messages: tuple[Message, ...]
    params: dict[str, Any]  # everything sent besides system and messages (model, limits, effort)
    reply_text: str = ""
    thinking: str = ""
    finish_reason: str = ""
    usage: Usage = field(default_factory=Usage)
    cost_usd: float | None = None
    error_kind: str | None = None
    error_message: str | None = None
    notes: tuple[str, ...] = ()
    response: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @classmethod
    def from_result(
        cls,
        result: LLMResult,
        *,
        agent: str,
        purpose: str,
        round: int | None,
        attempt: int,
        system: str,
        messages: Iterable[Message],
        started_at: float | None = None,
    ) -> CallRecord:
        """Record a call from its result; the prompt is passed in, so the record is complete."""
        params = {k: v for k, v in result.request.items() if k not in ("system", "messages")}
        common: dict[str, Any] = {
            "call_id": f"{agent}-{uuid.uuid4().hex[:12]}",
            "agent": agent,
            "purpose": purpose,
            "round": round,
            "attempt": attempt,
            "provider": result.provider,
            "model": result.model,
            "started_at": time.time() - result.latency_s if started_at is None else started_at,
            "latency_s": result.latency_s,
            "system": system,
            "messages": tuple(messages),
            "params": params,
            "response": result.response,
        }
        if isinstance(result, LLMReply):
            return cls(
                **common,
                reply_text=result.text,
                thinking=result.thinking,
                finish_reason=result.finish_reason,
                usage=result.usage,
                cost_usd=result.cost_usd,
                notes=result.notes,
            )
        return cls(
            **common,
            reply_text=result.partial_text,
            finish_reason="length" if result.kind == "truncated" else "",
            usage=result.usage or Usage(),
            cost_usd=result.cost_usd,
            error_kind=result.kind,
            error_message=result.message,
        )

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["messages"] = [m.to_dict() for m in self.messages]
        data["usage"] = self.usage.to_dict()
        data["notes"] = list(self.notes)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CallRecord:
        """Rebuild a record from `to_dict` output (resuming a session from its run folder)."""
        kwargs = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        kwargs["messages"] = tuple(Message(m["role"], m["content"]) for m in data.get("messages", ()))
        kwargs["usage"] = Usage.from_dict(data.get("usage") or {})
        kwargs["notes"] = tuple(data.get("notes", ()))
        return cls(**kwargs)


def write_transcript(path: str | Path, records: Iterable[CallRecord]) -> Path:
    """Write records as JSON Lines, atomically (temp file + rename) so a crash leaves no half file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for record in records:
                fh.write(json.dumps(record.to_dict(), ensure_ascii=False, default=str))
                fh.write("\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def read_transcript(path: str | Path) -> list[CallRecord]:
    """Read a transcript written by `write_transcript`."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [CallRecord.from_dict(json.loads(line)) for line in lines if line.strip()]


@dataclass(frozen=True)
class UsageTotals:
    """Sums over a set of calls. `cost_usd` counts priced calls only; `unpriced_calls` says how
    many had no price, so a total is never silently presented as complete."""

    calls: int = 0
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    unpriced_calls: int = 0
    latency_s: float = 0.0
    errors: int = 0

    @property
    def cost_known(self) -> bool:
        return self.unpriced_calls == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "usage": self.usage.to_dict(),
            "cost_usd": self.cost_usd,
            "unpriced_calls": self.unpriced_calls,
            "latency_s": self.latency_s,
            "errors": self.errors,
        }


def known_cost(records: Iterable[CallRecord]) -> float | None:
    """Dollars of these calls, or None ("unknown") when any call that billed tokens has no price: a total
    with an unpriced call in it is not a total. No calls cost 0.0."""
    totals = _sum(records)
    return totals.cost_usd if totals.cost_known else None


def _sum(records: Iterable[CallRecord]) -> UsageTotals:
    calls = errors = unpriced = 0
    usage = Usage()
    cost = latency = 0.0
    for r in records:
        calls += 1
        usage = usage + r.usage
        latency += r.latency_s
        errors += 0 if r.ok else 1
        if r.cost_usd is None:
            # A call that billed nothing (a refused connection) is not "unpriced".
            unpriced += 1 if r.usage.total_tokens else 0
        else:
            cost += r.cost_usd
    return UsageTotals(calls, usage, cost, unpriced, latency, errors)


class UsageLedger:
    """Every call of a session, summable per round, per agent and in total, with a dollar cap.

    Mutable on purpose (the session appends as calls finish); what it hands out is frozen.
    Calls to unpriced models cannot count against the cap: `exceeded()` looks at priced spend
    only, and `cost_known` tells the caller that the figure is a lower bound.
    """

    def __init__(self, cap_usd: float | None = None, records: Iterable[CallRecord] = ()) -> None:
        self.cap_usd = cap_usd
        self.records: list[CallRecord] = list(records)

    def add(self, record: CallRecord) -> None:
        self.records.append(record)

    def extend(self, records: Iterable[CallRecord]) -> None:
        self.records.extend(records)

    def total(self, *, round: int | None = None, agent: str | None = None) -> UsageTotals:
        """Totals over all calls, or those of one round and/or one agent."""
        selected = (
            r
            for r in self.records
            if (round is None or r.round == round) and (agent is None or r.agent == agent)
        )
        return _sum(selected)

    def by_round(self) -> dict[int | None, UsageTotals]:
        rounds: dict[int | None, list[CallRecord]] = {}
        for r in self.records:
            rounds.setdefault(r.round, []).append(r)
        return {k: _sum(v) for k, v in rounds.items()}

    @property
    def spent_usd(self) -> float:
        return self.total().cost_usd

    @property
    def cost_known(self) -> bool:
        return self.total().cost_known

    def remaining_usd(self) -> float | None:
        return None if self.cap_usd is None else self.cap_usd - self.spent_usd

    def exceeded(self) -> bool:
        """True once priced spend has reached the cap (checked before each new call)."""
        return self.cap_usd is not None and self.spent_usd >= self.cap_usd

    def to_dict(self) -> dict[str, Any]:
        return {
            "cap_usd": self.cap_usd,
            "total": self.total().to_dict(),
            "by_round": {str(k): v.to_dict() for k, v in self.by_round().items()},
        }


Budget = UsageLedger
