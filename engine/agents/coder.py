"""The Coder: writes a `ModelNew` module (seed, repair, optimize) through any LLMClient.

Retry policy (documented in docs/README-providers.md): transport failures were already retried
by the SDK and come back as errors at once. Two content failures get exactly one more call:
- no usable module (no code, no `class ModelNew`, a syntax error): the reply and the reason are
  sent back, and the Coder is asked again;
- a reply cut off at max_output_tokens: unless the cut-off text already holds a complete module,
  the prompt is sent again with a note to be brief.
A second failure is returned as an error value (`no_module` or `truncated`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cudaforge.engine.agents.base import Agent, RecordHook, total_cost, total_usage
from cudaforge.engine.agents.extract import extract_module_detailed
from cudaforge.engine.agents.prompts import (
    Prompt,
    build_coder_optimize,
    build_coder_repair,
    build_coder_seed,
    coder_retry_message,
    coder_truncation_note,
)
from cudaforge.engine.agents.summary import RoundNote
from cudaforge.engine.llm.client import LLMClient
from cudaforge.engine.llm.types import CallRecord, LLMError, Message, Usage, UsageLedger
from cudaforge.engine.results import EvalResult

MAX_ATTEMPTS = 2


def _explanation(text: str) -> str:
    """The prose before the first code fence: the Coder's own summary of its change."""
    lines = []
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            break
        lines.append(line)
    return "\n".join(lines).strip()


@dataclass(frozen=True)
class CoderReply:
    """The module the Coder wrote, or why there is none, with every call it took."""

    purpose: str
    source: str | None
    text: str = ""  # the last reply, as written
    explanation: str = ""
    error: LLMError | None = None
    records: tuple[CallRecord, ...] = ()
    prompt: Prompt | None = None

    @property
    def ok(self) -> bool:
        return self.source is not None

    @property
    def usage(self) -> Usage:
        return total_usage(self.records)

    @property
    def cost_usd(self) -> float | None:
        return total_cost(self.records)

    def to_dict(self) -> dict[str, Any]:
        return {
            "purpose": self.purpose,
            "source": self.source,
            "text": self.text,
            "explanation": self.explanation,
            "error": self.error.to_dict() if self.error else None,
            "records": [r.to_dict() for r in self.records],
            "prompt": self.prompt.to_dict() if self.prompt else None,
        }


class Coder(Agent):
    """Builds the Coder's prompts and turns replies into a module (see the module docstring)."""

    name = "coder"

    def __init__(
        self,
        client: LLMClient,
        *,
        format: str = "nvrtc",
        gpu_summary: str = "",
        ledger: UsageLedger | None = None,
        on_record: RecordHook | None = None,
    ) -> None:
        super().__init__(client, gpu_summary=gpu_summary, ledger=ledger, on_record=on_record)
        self.format = format

    async def seed(self, task_source: str, *, round: int | None = None) -> CoderReply:
        """The first candidate for a task."""
        prompt = build_coder_seed(task_source, gpu_summary=self.gpu_summary, format=self.format)
        return await self.run(prompt, purpose="seed", round=round)

    async def repair(
        self,
        task_source: str,
        *,
        candidate_source: str,
        result: EvalResult | None,
        recommendation: Any = None,
        history: Sequence[RoundNote] = (),
        round: int | None = None,
    ) -> CoderReply:
        """Fix a candidate that failed, given the Judge's diagnosis (JudgeReply or edited text)."""
        prompt = build_coder_repair(
            task_source,
            candidate_source=candidate_source,
            result=result,
            recommendation=recommendation,
            history=history,
            gpu_summary=self.gpu_summary,
            format=self.format,
        )
        return await self.run(prompt, purpose="repair", round=round)

    async def optimize(
        self,
        task_source: str,
        *,
        candidate_source: str,
        result: EvalResult | None,
        recommendation: Any = None,
        history: Sequence[RoundNote] = (),
        round: int | None = None,
    ) -> CoderReply:
        """Make a correct candidate faster, given the Judge's recommendation."""
        prompt = build_coder_optimize(
            task_source,
            candidate_source=candidate_source,
            result=result,
            recommendation=recommendation,
            history=history,
            gpu_summary=self.gpu_summary,
            format=self.format,
        )
        return await self.run(prompt, purpose="optimize", round=round)

    async def run(self, prompt: Prompt, *, purpose: str, round: int | None = None) -> CoderReply:
        """Send a (possibly person-edited) prompt and extract the module, retrying once."""
        records: list[CallRecord] = []
        messages = prompt.messages()
        text = ""
        for attempt in range(1, MAX_ATTEMPTS + 1):
            label = purpose if attempt == 1 else f"{purpose}/retry"
            result, record = await self._call(
                prompt.system, messages, purpose=label, round=round, attempt=attempt
            )
            if record is not None:
                records.append(record)
            truncated = isinstance(result, LLMError) and result.kind == "truncated"
            if isinstance(result, LLMError) and not truncated:
                return CoderReply(purpose, None, text, "", result, tuple(records), prompt)
            text = result.partial_text if isinstance(result, LLMError) else result.text
            extraction = extract_module_detailed(text)
            if extraction.source is not None:
                return CoderReply(
                    purpose, extraction.source, text, _explanation(text), None, tuple(records), prompt
                )
            if attempt == MAX_ATTEMPTS:
                error = (
                    result
                    if isinstance(result, LLMError)
                    else LLMError(
                        kind="no_module",
                        message=f"no usable ModelNew module after {attempt} replies: {extraction.reason}",
                        provider=result.provider,
                        model=result.model,
                        latency_s=result.latency_s,
                    )
                )
                return CoderReply(purpose, None, text, _explanation(text), error, tuple(records), prompt)
            if truncated:
                limit = result.request.get("max_tokens") or result.request.get("max_completion_tokens") or "?"
                messages = [Message("user", f"{prompt.user}\n\n{coder_truncation_note(limit)}")]
            elif text.strip():
                messages = [
                    *prompt.messages(),
                    Message("assistant", text),
                    Message("user", coder_retry_message(extraction.reason)),
                ]
            else:  # an empty assistant turn is refused by some APIs: fold the note into the prompt
                messages = [Message("user", f"{prompt.user}\n\n{coder_retry_message(extraction.reason)}")]
        raise AssertionError("unreachable")
