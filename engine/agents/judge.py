"""The Judge: one recommendation per round, as validated JSON, in correction or optimization mode.

An invalid reply is sent back once with the validation error; if the second is invalid too, or
the call itself fails, a clearly marked fallback recommendation (`fallback=True`) is returned so
the round can go on, and the session can show why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cudaforge.engine.agents.base import Agent, total_cost, total_usage
from cudaforge.engine.agents.extract import extract_json_object
from cudaforge.engine.agents.prompts import (
    CORRECT_KEYS,
    OPTIMIZE_KEYS,
    Prompt,
    build_judge_correct,
    build_judge_optimize,
    judge_retry_message,
)
from cudaforge.engine.agents.summary import error_log_tail, metric_names
from cudaforge.engine.compiler_log import first_error_text
from cudaforge.engine.llm.types import CallRecord, LLMError, Message, Usage
from cudaforge.engine.results import EvalResult

JudgeMode = Literal["correct", "optimize"]
MAX_ATTEMPTS = 2
FALLBACK_MARK = "[fallback]"


@dataclass(frozen=True)
class JudgeReply:
    """One recommendation. Fields of the other mode stay empty."""

    mode: JudgeMode
    critical_issue: str = ""
    why_it_matters: str = ""
    minimal_fix_hint: str = ""
    bottleneck: str = ""
    method: str = ""
    plan: str = ""
    evidence: tuple[str, ...] = ()
    unknown_evidence: tuple[str, ...] = ()  # evidence names not among the metrics given
    fallback: bool = False
    fallback_reason: str = ""
    error: LLMError | None = None  # set when the call itself failed
    text: str = ""  # the last reply, as written
    records: tuple[CallRecord, ...] = ()
    prompt: Prompt | None = field(default=None, compare=False)

    @property
    def usage(self) -> Usage:
        return total_usage(self.records)

    @property
    def cost_usd(self) -> float | None:
        return total_cost(self.records)

    def fields(self) -> dict[str, Any]:
        """The recommendation's JSON fields for its mode."""
        if self.mode == "correct":
            return {k: getattr(self, k) for k in CORRECT_KEYS}
        return {
            "bottleneck": self.bottleneck,
            "method": self.method,
            "plan": self.plan,
            "evidence": list(self.evidence),
        }

    def as_text(self) -> str:
        """The recommendation as the Coder reads it (and the person sees it)."""
        head = (
            f"{FALLBACK_MARK} The Judge's reply was unusable ({self.fallback_reason}); generic advice:\n"
            if self.fallback
            else ""
        )
        if self.mode == "correct":
            body = (
                f"Critical issue: {self.critical_issue}\n"
                f"Why it matters: {self.why_it_matters}\n"
                f"Minimal fix: {self.minimal_fix_hint}"
            )
        else:
            evidence = ", ".join(self.evidence) if self.evidence else "(none)"
            body = f"Bottleneck: {self.bottleneck}\nMethod: {self.method}\nPlan: {self.plan}\nEvidence: {evidence}"
        return head + body

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            **self.fields(),
            "unknown_evidence": list(self.unknown_evidence),
            "fallback": self.fallback,
            "fallback_reason": self.fallback_reason,
            "error": self.error.to_dict() if self.error else None,
            "text": self.text,
            "records": [r.to_dict() for r in self.records],
            "prompt": self.prompt.to_dict() if self.prompt else None,
        }


def validate_judge_json(data: Mapping[str, Any], mode: JudgeMode) -> tuple[dict[str, Any] | None, str]:
    """Check a parsed reply against the mode's schema; returns (fields, "") or (None, why).

    Plain Python on purpose (no pydantic: the engine stays light). Extra keys are ignored.
    """
    keys = CORRECT_KEYS if mode == "correct" else OPTIMIZE_KEYS
    missing = [k for k in keys if k not in data]
    if missing:
        return None, f"missing key(s) {', '.join(repr(k) for k in missing)}"
    out: dict[str, Any] = {}
    for key in keys:
        value = data[key]
        if key == "evidence":
            if isinstance(value, str):  # a single name written as a string: accept it
                value = [value] if value.strip() else []
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                return None, "'evidence' must be a list of metric-name strings"
            out[key] = tuple(v.strip() for v in value if v.strip())
            continue
        if not isinstance(value, str):
            return None, f"{key!r} must be a string, got {type(value).__name__}"
        if not value.strip():
            return None, f"{key!r} is empty"
        out[key] = value.strip()
    return out, ""


def parse_judge_reply(text: str, mode: JudgeMode) -> tuple[dict[str, Any] | None, str]:
    """JSON out of the reply text, then the schema check."""
    data, why = extract_json_object(text)
    if data is None:
        return None, why
    return validate_judge_json(data, mode)


def fallback_reply(
    mode: JudgeMode,
    reason: str,
    *,
    error_log: str = "",
    error: LLMError | None = None,
    text: str = "",
    records: Sequence[CallRecord] = (),
    prompt: Prompt | None = None,
) -> JudgeReply:
    """Generic advice, marked as such, used when the Judge gave nothing usable."""
    if mode == "correct":
        first = first_error_text(error_log)
        return JudgeReply(
            mode="correct",
            critical_issue=f"{FALLBACK_MARK} not diagnosed; the first reported error is: {first or '(none found)'}",
            why_it_matters="Without a diagnosis, the error log and the measurement are the only guide.",
            minimal_fix_hint="Fix the first error in the log (or the first mismatching output) and change nothing else.",
            fallback=True,
            fallback_reason=reason,
            error=error,
            text=text,
            records=tuple(records),
            prompt=prompt,
        )
    return JudgeReply(
        mode="optimize",
        bottleneck=f"{FALLBACK_MARK} not analysed",
        method="reduce global-memory traffic",
        plan=(
            "Fuse consecutive steps so intermediate results stay in registers or shared memory instead of "
            "global memory, make loads and stores coalesced (and vectorized where alignment allows), and "
            "launch enough blocks to cover every SM."
        ),
        fallback=True,
        fallback_reason=reason,
        error=error,
        text=text,
        records=tuple(records),
        prompt=prompt,
    )


class Judge(Agent):
    """Builds the Judge's prompts and validates its JSON replies (see the module docstring)."""

    name = "judge"

    async def correct(
        self,
        task_source: str,
        *,
        candidate_source: str,
        result: EvalResult | None,
        error_log: str | None = None,
        round: int | None = None,
    ) -> JudgeReply:
        """Diagnose a failed candidate (compile error, wrong result, crash)."""
        log = error_log if error_log is not None else error_log_tail(result)
        prompt = build_judge_correct(
            task_source, candidate_source=candidate_source, result=result, error_log=log
        )
        return await self.run(prompt, mode="correct", round=round, error_log=log)

    async def optimize(
        self,
        task_source: str,
        *,
        candidate_source: str,
        result: EvalResult | None,
        metrics: Any = None,
        findings: Iterable[Any] | str | None = None,
        round: int | None = None,
    ) -> JudgeReply:
        """Find the bottleneck of a correct candidate and recommend one optimization."""
        prompt = build_judge_optimize(
            task_source,
            candidate_source=candidate_source,
            result=result,
            metrics=metrics,
            findings=findings,
            gpu_summary=self.gpu_summary,
        )
        return await self.run(prompt, mode="optimize", round=round, known_metrics=metric_names(metrics))

    async def run(
        self,
        prompt: Prompt,
        *,
        mode: JudgeMode,
        round: int | None = None,
        error_log: str = "",
        known_metrics: set[str] | None = None,
    ) -> JudgeReply:
        """Send a (possibly person-edited) prompt; validate, retry once, else fall back."""
        records: list[CallRecord] = []
        messages = prompt.messages()
        text = ""
        why = ""
        for attempt in range(1, MAX_ATTEMPTS + 1):
            label = mode if attempt == 1 else f"{mode}/retry"
            result, record = await self._call(
                prompt.system, messages, purpose=label, round=round, attempt=attempt
            )
            if record is not None:
                records.append(record)
            truncated = isinstance(result, LLMError) and result.kind == "truncated"
            if isinstance(result, LLMError) and not truncated:
                return fallback_reply(
                    mode,
                    f"the call failed: {result.one_line()}",
                    error_log=error_log,
                    error=result,
                    text=text,
                    records=records,
                    prompt=prompt,
                )
            text = result.partial_text if isinstance(result, LLMError) else result.text
            fields, why = parse_judge_reply(text, mode)
            if fields is not None:
                unknown: tuple[str, ...] = ()
                if known_metrics:
                    unknown = tuple(e for e in fields.get("evidence", ()) if e not in known_metrics)
                return JudgeReply(
                    mode=mode,
                    **fields,
                    unknown_evidence=unknown,
                    text=text,
                    records=tuple(records),
                    prompt=prompt,
                )
            if truncated:
                why = f"the reply was cut off at the output limit before the JSON was complete ({why})"
            if attempt < MAX_ATTEMPTS:
                retry = judge_retry_message(why, mode)
                if text.strip():
                    messages = [*prompt.messages(), Message("assistant", text), Message("user", retry)]
                else:
                    messages = [Message("user", f"{prompt.user}\n\n{retry}")]
        return fallback_reply(
            mode,
            f"invalid reply twice: {why}",
            error_log=error_log,
            text=text,
            records=records,
            prompt=prompt,
        )
