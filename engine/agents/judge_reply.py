"""The Judge's reply: one recommendation, correction or optimization fields, the same type from
the LLM Judge (engine/agents/judge.py) and the offline Judge (engine/agents/offline_judge.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from cudaforge.engine.agents.base import total_cost, total_usage
from cudaforge.engine.agents.prompts import CORRECT_KEYS, Prompt
from cudaforge.engine.llm.types import CallRecord, LLMError, Usage

JudgeMode = Literal["correct", "optimize"]
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
            f"{FALLBACK_MARK} The Judge's reply was unusable ({self.fallback_reason}); the offline Judge's advice:\n"
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
