"""The Judge: one recommendation per round, as validated JSON, in correction or optimization mode.

An invalid reply is sent back once with the validation error; if the second is invalid too, or
the call itself fails, the offline Judge's recommendation (engine/agents/offline_judge.py), marked
`fallback=True`, is returned so the round can go on, and the session can show why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cudaforge.engine.agents.base import Agent
from cudaforge.engine.agents.extract import extract_json_object
from cudaforge.engine.agents.judge_reply import JudgeMode, JudgeReply
from cudaforge.engine.agents.offline_judge import offline_fallback
from cudaforge.engine.agents.prompts import (
    CORRECT_KEYS,
    OPTIMIZE_KEYS,
    Prompt,
    build_judge_correct,
    build_judge_optimize,
    judge_retry_message,
)
from cudaforge.engine.agents.summary import error_log_tail, metric_names
from cudaforge.engine.llm.types import CallRecord, LLMError, Message
from cudaforge.engine.profiling.analysis import Analysis
from cudaforge.engine.results import EvalResult

MAX_ATTEMPTS = 2


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
        return await self.run(prompt, mode="correct", round=round, error_log=log, result=result)

    async def optimize(
        self,
        task_source: str,
        *,
        candidate_source: str,
        result: EvalResult | None,
        metrics: Any = None,
        findings: Iterable[Any] | str | None = None,
        analysis: Analysis | None = None,
        round: int | None = None,
    ) -> JudgeReply:
        """Find the bottleneck of a correct candidate and recommend one optimization. `analysis`
        (the ncu analysis) is what the offline Judge reads should the reply fail."""
        prompt = build_judge_optimize(
            task_source,
            candidate_source=candidate_source,
            result=result,
            metrics=metrics,
            findings=findings,
            gpu_summary=self.gpu_summary,
        )
        return await self.run(prompt, mode="optimize", round=round, known_metrics=metric_names(metrics),
                              result=result, analysis=analysis)

    async def run(
        self,
        prompt: Prompt,
        *,
        mode: JudgeMode,
        round: int | None = None,
        error_log: str = "",
        known_metrics: set[str] | None = None,
        result: EvalResult | None = None,
        analysis: Analysis | None = None,
    ) -> JudgeReply:
        """Send a (possibly person-edited) prompt; validate, retry once, else fall back to the
        offline Judge on `result` (correction) or `analysis` (optimization)."""
        records: list[CallRecord] = []
        messages = prompt.messages()
        text = ""
        why = ""
        for attempt in range(1, MAX_ATTEMPTS + 1):
            label = mode if attempt == 1 else f"{mode}/retry"
            reply, record = await self._call(
                prompt.system, messages, purpose=label, round=round, attempt=attempt
            )
            if record is not None:
                records.append(record)
            truncated = isinstance(reply, LLMError) and reply.kind == "truncated"
            if isinstance(reply, LLMError) and not truncated:
                return offline_fallback(
                    mode,
                    f"the call failed: {reply.one_line()}",
                    result=result,
                    analysis=analysis,
                    error_log=error_log,
                    error=reply,
                    text=text,
                    records=records,
                    prompt=prompt,
                )
            text = reply.partial_text if isinstance(reply, LLMError) else reply.text
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
        return offline_fallback(
            mode,
            f"invalid reply twice: {why}",
            result=result,
            analysis=analysis,
            error_log=error_log,
            text=text,
            records=records,
            prompt=prompt,
        )
