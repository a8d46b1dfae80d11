"""The Coder and the Judge: prompts (pure builders over markdown templates), reply extraction
and validation, retry-once policies, and the offline Judge (the one fallback). Imports no LLM SDK until a call is made."""

from cudaforge.engine.agents.base import Agent, total_cost, total_usage
from cudaforge.engine.agents.coder import Coder, CoderReply
from cudaforge.engine.agents.extract import (
    CodeBlock,
    Extraction,
    code_blocks,
    extract_json_object,
    extract_module,
    extract_module_detailed,
)
from cudaforge.engine.agents.judge import Judge, parse_judge_reply, validate_judge_json
from cudaforge.engine.agents.judge_reply import FALLBACK_MARK, JudgeMode, JudgeReply
from cudaforge.engine.agents.offline_judge import OfflineJudge, offline_fallback
from cudaforge.engine.agents.prompts import (
    CORRECT_KEYS,
    FORMATS,
    OPTIMIZE_KEYS,
    Prompt,
    build_coder_optimize,
    build_coder_repair,
    build_coder_seed,
    build_judge_correct,
    build_judge_optimize,
    coder_retry_message,
    coder_system_prompt,
    coder_truncation_note,
    format_recommendation,
    judge_retry_message,
    judge_system_prompt,
)
from cudaforge.engine.agents.summary import (
    RoundNote,
    error_log_tail,
    format_findings,
    format_history,
    format_metrics,
    metric_names,
    summarize_result,
    tail,
)

__all__ = [
    "CORRECT_KEYS",
    "FALLBACK_MARK",
    "FORMATS",
    "OPTIMIZE_KEYS",
    "Agent",
    "CodeBlock",
    "Coder",
    "CoderReply",
    "Extraction",
    "Judge",
    "JudgeMode",
    "JudgeReply",
    "OfflineJudge",
    "Prompt",
    "RoundNote",
    "build_coder_optimize",
    "build_coder_repair",
    "build_coder_seed",
    "build_judge_correct",
    "build_judge_optimize",
    "code_blocks",
    "coder_retry_message",
    "coder_system_prompt",
    "coder_truncation_note",
    "error_log_tail",
    "extract_json_object",
    "extract_module",
    "extract_module_detailed",
    "format_findings",
    "format_history",
    "format_metrics",
    "format_recommendation",
    "judge_retry_message",
    "judge_system_prompt",
    "offline_fallback",
    "metric_names",
    "parse_judge_reply",
    "summarize_result",
    "tail",
    "total_cost",
    "total_usage",
    "validate_judge_json",
]
