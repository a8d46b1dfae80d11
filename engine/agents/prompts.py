"""Prompt builders for the Coder and the Judge: pure functions from inputs to text.

The wording lives in markdown templates (engine/agents/prompts/*.md, shipped as package data) so
it can be read and reviewed as prose; `{{name}}` marks where inputs go. Builders are pure, so
golden-file tests pin every prompt, and the session can show (and let the person edit) a prompt
before it is sent.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from cudaforge.engine.agents.summary import (
    RoundNote,
    error_log_tail,
    format_findings,
    format_history,
    format_metrics,
    summarize_result,
)
from cudaforge.engine.config import choices
from cudaforge.engine.llm.types import Message
from cudaforge.engine.results import EvalResult

FORMATS = choices("session", "format")  # the formats a Coder writes
_PLACEHOLDER = re.compile(r"\{\{([a-z_]+)\}\}")

CORRECT_KEYS = ("critical_issue", "why_it_matters", "minimal_fix_hint")
OPTIMIZE_KEYS = ("bottleneck", "method", "plan", "evidence")


@dataclass(frozen=True)
class Prompt:
    """A system prompt and the first user message of one agent call."""

    system: str
    user: str

    def messages(self) -> list[Message]:
        return [Message("user", self.user)]

    def render(self) -> str:
        """Both parts as one text (for golden files and for showing the person)."""
        return f"=== system ===\n{self.system}\n=== user ===\n{self.user}\n"

    def to_dict(self) -> dict[str, str]:
        return {"system": self.system, "user": self.user}


@functools.cache
def load_template(name: str) -> str:
    """The text of prompts/<name>.md from package data."""
    path = resources.files("cudaforge.engine.agents").joinpath("prompts", f"{name}.md")
    return path.read_text(encoding="utf-8").rstrip("\n")


def render_template(name: str, **values: str) -> str:
    """Fill `{{key}}` slots; a missing or unused value is a programming error, caught by tests."""
    template = load_template(name)
    wanted = set(_PLACEHOLDER.findall(template))
    missing, unused = wanted - values.keys(), values.keys() - wanted
    if missing or unused:
        raise KeyError(f"template {name}: missing {sorted(missing)}, unused {sorted(unused)}")
    # One pass over the template only: inserted text (C++ with '{{') is never re-scanned.
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def _check_format(format: str) -> str:
    if format not in FORMATS:
        raise ValueError(f"unknown candidate format '{format}' (expected one of {', '.join(FORMATS)})")
    return format


def _gpu(gpu_summary: str) -> str:
    return gpu_summary.strip() or "(no GPU spec available)"


def _code(source: str) -> str:
    return source.strip("\n")


def format_recommendation(recommendation: Any) -> str:
    """The Judge's advice as text: a JudgeReply (its `as_text()`), free text kept verbatim
    (the person may have edited it), or a note that there is none."""
    if recommendation is None:
        return "(no recommendation this round: use the measurements above)"
    if isinstance(recommendation, str):
        return recommendation.strip() or "(no recommendation this round: use the measurements above)"
    as_text = getattr(recommendation, "as_text", None)
    if callable(as_text):
        return str(as_text())
    return str(recommendation)


def coder_system_prompt(format: str = "nvrtc") -> str:
    """The Coder's standing instructions, with the rules and example of the candidate format."""
    rules = load_template(f"format_{_check_format(format)}")
    return render_template("coder_system", format_rules=rules)


def build_coder_seed(task_source: str, *, gpu_summary: str = "", format: str = "nvrtc") -> Prompt:
    """Round one: the task only."""
    user = render_template("coder_seed", gpu_summary=_gpu(gpu_summary), task_source=_code(task_source))
    return Prompt(coder_system_prompt(format), user)


def _coder_followup(
    template: str,
    task_source: str,
    candidate_source: str,
    result: EvalResult | None,
    recommendation: Any,
    history: Sequence[RoundNote],
    gpu_summary: str,
    format: str,
) -> Prompt:
    user = render_template(
        template,
        gpu_summary=_gpu(gpu_summary),
        task_source=_code(task_source),
        candidate_source=_code(candidate_source),
        result_summary=summarize_result(result),
        recommendation=format_recommendation(recommendation),
        history=format_history(history),
    )
    return Prompt(coder_system_prompt(format), user)


def build_coder_repair(
    task_source: str,
    *,
    candidate_source: str,
    result: EvalResult | None,
    recommendation: Any = None,
    history: Sequence[RoundNote] = (),
    gpu_summary: str = "",
    format: str = "nvrtc",
) -> Prompt:
    """After a failed round: fix the candidate, guided by the Judge's diagnosis."""
    return _coder_followup(
        "coder_repair", task_source, candidate_source, result, recommendation, history, gpu_summary, format
    )


def build_coder_optimize(
    task_source: str,
    *,
    candidate_source: str,
    result: EvalResult | None,
    recommendation: Any = None,
    history: Sequence[RoundNote] = (),
    gpu_summary: str = "",
    format: str = "nvrtc",
) -> Prompt:
    """After a correct round: make it faster, guided by the Judge's recommendation."""
    return _coder_followup(
        "coder_optimize", task_source, candidate_source, result, recommendation, history, gpu_summary, format
    )


def coder_retry_message(reason: str) -> str:
    """Sent after a reply without a usable module, with the reason."""
    return render_template("coder_retry", reason=reason.rstrip("."))


def coder_truncation_note(limit: int | str) -> str:
    """Appended to the prompt after a reply was cut off at the output limit."""
    return render_template("coder_truncated", limit=str(limit))


def judge_system_prompt() -> str:
    return load_template("judge_system")


def build_judge_correct(
    task_source: str,
    *,
    candidate_source: str,
    result: EvalResult | None,
    error_log: str | None = None,
) -> Prompt:
    """Correction mode: the error log's tail (from the result unless given), task and candidate."""
    log = error_log if error_log is not None else error_log_tail(result)
    user = render_template(
        "judge_correct",
        outcome=result.outcome if result is not None else "unknown",
        task_source=_code(task_source),
        candidate_source=_code(candidate_source),
        result_summary=summarize_result(result, include_logs=False),
        error_log=log.strip() or "(empty)",
    )
    return Prompt(judge_system_prompt(), user)


def build_judge_optimize(
    task_source: str,
    *,
    candidate_source: str,
    result: EvalResult | None,
    metrics: Any = None,
    findings: Iterable[Any] | str | None = None,
    gpu_summary: str = "",
) -> Prompt:
    """Optimization mode: GPU spec, code, measured times, per-kernel metrics, analyzer findings."""
    user = render_template(
        "judge_optimize",
        gpu_summary=_gpu(gpu_summary),
        task_source=_code(task_source),
        candidate_source=_code(candidate_source),
        result_summary=summarize_result(result),
        metrics=format_metrics(metrics),
        findings=format_findings(findings),
    )
    return Prompt(judge_system_prompt(), user)


def judge_retry_message(reason: str, mode: str) -> str:
    """Sent after an invalid Judge reply, with the validation error."""
    if mode == "correct":
        keys, types = CORRECT_KEYS, "All values are non-empty strings."
    else:
        keys = OPTIMIZE_KEYS
        types = '"bottleneck", "method" and "plan" are non-empty strings; "evidence" is a list of strings.'
    return render_template(
        "judge_retry", reason=reason.rstrip("."), keys=", ".join(f'"{k}"' for k in keys), types=types
    )
