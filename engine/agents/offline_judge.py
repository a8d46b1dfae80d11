"""The offline Judge: the recommendation an LLM Judge would give, from rules, with no LLM.

It is `[judge] provider = "heuristic"`, and the one fallback when an LLM Judge's reply is unusable
(engine/agents/judge.py). Correction mode reads the failed evaluation (the compiler log through
engine/compiler_log.py, the worst mismatching output, the integrity findings); optimization mode
reads the top-ranked finding of the ncu analysis (engine/profiling/analysis.py). It returns the
same `JudgeReply` as the LLM Judge.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from cudaforge.engine.agents.judge_reply import JudgeMode, JudgeReply
from cudaforge.engine.agents.prompts import Prompt
from cudaforge.engine.compiler_log import classify as classify_error
from cudaforge.engine.compiler_log import first_error_text, headline
from cudaforge.engine.llm.types import CallRecord, LLMError
from cudaforge.engine.profiling.analysis import DURATION, Analysis
from cudaforge.engine.results import EvalResult, OutputCheck

NO_PROFILE = "no hardware profile for this round (CPU device, profiling off or failed)"

_FAILED = {
    "compile_error",
    "runtime_error",
    "wrong_result",
    "integrity_failure",
    "timeout",
    "crash",
    "cuda_error",
    "oom",
}


def _on_cpu(result: EvalResult | None, analysis: Analysis | None = None) -> bool:
    """Whether the candidate ran on the CPU device: its advice is about C++ loops, not GPU kernels."""
    if result is not None and result.device:
        return result.device == "cpu"
    return analysis is not None and analysis.gpu == "cpu"


def _optimization(analysis: Analysis, eval_result: EvalResult | None) -> dict[str, Any]:
    """Optimization fields from the top-ranked finding (keys of prompts.OPTIMIZE_KEYS)."""
    if not analysis.findings:
        if not analysis.kernels and _on_cpu(eval_result, analysis):
            return {
                "bottleneck": "unknown: no hardware counters on the CPU device (timing only)",
                "method": "vectorize and parallelize the C++ loop",
                "plan": "Read the input through raw contiguous pointers in a flat inner loop the compiler can "
                "vectorize (no per-element accessors or tensor ops inside it), split the outer range across "
                "threads with at::parallel_for, and fuse consecutive operations into that one pass so "
                "intermediates stay in registers and cache.",
                "evidence": [],
            }
        if not analysis.kernels:
            why = analysis.profile_message or "no profile"
            return {
                "bottleneck": f"unknown: no hardware metrics ({why})",
                "method": "reduce global-memory traffic",
                "plan": "Without counters, start from the usual first step: fuse consecutive operations into one "
                "kernel so intermediates stay in registers, use coalesced 128-bit loads and stores, and launch "
                "at least a few blocks per SM.",
                "evidence": [],
            }
        top = max(analysis.kernels, key=lambda ka: ka.time_share)
        return {
            "bottleneck": f"{top.short_name}: {top.bottleneck} ({top.reason})",
            "method": "no dominant limiter found; profile a larger problem or try a different algorithm",
            "plan": f"{top.short_name} takes {top.time_share:.0%} of GPU time and no single unit limits it; "
            "restructure its algorithm (tiling, fewer passes over memory) and measure again.",
            "evidence": [DURATION[0]],
        }
    f = analysis.findings[0]
    ka = next((k for k in analysis.kernels if k.launch_id == f.launch_id), None)
    share = f" ({ka.time_share:.0%} of GPU time, {ka.bottleneck})" if ka else ""
    evidence_text = "; ".join(e.describe() for e in f.evidence[:3])
    plan = f"In {f.kernel}: {f.recommendation}"
    if ka is not None and eval_result is not None and _is_custom(ka.name, eval_result) is False:
        plan = (
            f"{f.kernel} is launched by PyTorch (ATen/cuBLAS), not by the candidate's own code: replace that "
            f"call with a custom kernel (or fuse it into one) and apply this there. {f.recommendation}"
        )
    return {
        "bottleneck": f"{f.kernel}{share}: {f.title}. {evidence_text}",
        "method": f.method,
        "plan": plan,
        "evidence": list(f.metrics) or [DURATION[0]],
    }


def _base_identifier(name: str) -> str:
    """`void ns::kern<T>(int)` -> `ns::kern`: comparable between ncu and torch.profiler names."""
    text = name.strip()
    if text.startswith("void "):
        text = text[5:]
    return re.split(r"[<(]", text, maxsplit=1)[0].strip()


def _is_custom(kernel_name: str, result: EvalResult) -> bool | None:
    """Whether the evaluator saw this kernel as the candidate's own (None when it did not list it)."""
    ident = _base_identifier(kernel_name)
    for launch in result.kernels:
        other = _base_identifier(launch.name)
        if (
            ident
            and other
            and (ident == other or ident.endswith("::" + other) or other.endswith("::" + ident))
        ):
            return launch.custom
    return None


def _hint_for(text: str) -> str | None:
    return classify_error(text)[1]


def _worst_output(outputs: tuple[OutputCheck, ...]) -> OutputCheck | None:
    failing = [o for o in outputs if not o.passed]
    return failing[0] if failing else None


def _correction(result: EvalResult) -> dict[str, Any]:
    """Correction-mode fields from the error log or the mismatch summary of a failed evaluation."""
    outcome = result.outcome
    if outcome == "compile_error":
        log = result.compile.log if result.compile else ""
        # the worker's headline places the first diagnostic in the candidate; an older message may not
        placed = result.message.startswith("compile error: line ")
        first = result.message.removeprefix("compile error: ") if placed else headline(log) or result.message
        hint = (
            _hint_for(first)
            or _hint_for(log)
            or "fix the first reported error; later errors often follow from it"
        )
        return {
            "critical_issue": f"the candidate does not compile: {first}",
            "why_it_matters": "Nothing ran, so there is no correctness check, timing or profile until it builds.",
            "minimal_fix_hint": hint[0].upper() + hint[1:] + "; change nothing else.",
        }
    if outcome == "wrong_result" and result.correctness is not None:
        c = result.correctness
        o = _worst_output(c.outputs)
        trials = f"{c.trials_passed}/{c.trials} trials passed"
        if o is None:
            return {
                    "critical_issue": f"the output differs from the reference ({trials}): {result.message}",
                "why_it_matters": "A wrong result is never accepted, however fast.",
                "minimal_fix_hint": "Compare the kernel's indexing and formula with the reference Model line by line.",
            }
        where = f"output {o.index}"
        if o.shape_expected != o.shape_got:
            return {
                    "critical_issue": f"{where} has shape {list(o.shape_got)}, the reference has {list(o.shape_expected)}",
                "why_it_matters": "Shapes must match exactly; the values cannot even be compared.",
                "minimal_fix_hint": "Allocate the output with the reference's shape (same reduction/keepdim, "
                "same view/reshape) and launch enough threads to cover it.",
            }
        if o.dtype_expected != o.dtype_got:
            return {
                    "critical_issue": f"{where} has dtype {o.dtype_got}, the reference has {o.dtype_expected}",
                "why_it_matters": "Dtypes must match exactly.",
                "minimal_fix_hint": f"Allocate the output as {o.dtype_expected} (or cast before returning).",
            }
        if o.nonfinite_got:
            return {
                    "critical_issue": f"{where} contains {o.nonfinite_got} NaN/Inf value(s) ({trials})",
                "why_it_matters": "NaN/Inf never pass; they usually come from uninitialised memory, reads out of "
                "bounds or a division by zero.",
                "minimal_fix_hint": "Write every output element (no torch.empty left partly unwritten), guard loads "
                "with the bounds check, and keep numerically unsafe math (exp, division) in the reference's form.",
            }
        frac = o.mismatches / o.numel if o.numel else 0.0
        worst = ""
        if o.worst:
            w = o.worst[0]
            worst = f"; worst at index {list(w.index)}: expected {w.expected:.6g}, got {w.got:.6g}"
        issue = (
            f"{where}: {o.mismatches} of {o.numel} elements exceed the tolerance "
            f"(max abs err {o.max_abs_err:.3g}, max rel err {o.max_rel_err:.3g}; {trials}){worst}"
        )
        if frac >= 0.9:
            hint = (
                "almost every element is wrong: check the formula against the reference and the index "
                "mapping (row/column order, strides of non-contiguous inputs, which dimension is reduced)"
            )
        elif o.max_abs_err < max(c.atol, 1e-6) * 100:
            hint = (
                "errors are small, a precision issue: accumulate in FP32, keep the reference's order of "
                "operations, avoid TF32/half precision and fast-math intrinsics"
            )
        elif frac < 0.05:
            hint = (
                "a few elements are wrong: check the boundary/tail handling (sizes that are not a multiple "
                "of the block or tile size) and the bounds guard"
            )
        elif _on_cpu(result):
            hint = (
                "part of the output is wrong: check the loop bounds and index arithmetic of each block of "
                "work, and races between threads (at::parallel_for chunks writing the same element or "
                "accumulator)"
            )
        else:
            hint = (
                "part of the output is wrong: check tile boundaries, missing __syncthreads between writing "
                "and reading shared memory, and race conditions on shared or global accumulators"
            )
        return {
            "critical_issue": issue,
            "why_it_matters": "A wrong result is never accepted; the pattern of the errors points at the cause.",
            "minimal_fix_hint": hint[0].upper() + hint[1:] + ".",
        }
    if outcome == "integrity_failure":
        failing = result.failing_findings()
        names = ", ".join(f"{f.name} ({f.message})" for f in failing[:3]) or result.message
        return {
            "critical_issue": f"integrity check failed: {names}",
            "why_it_matters": "The numbers may be right, but the measurement cannot be trusted, so it is not accepted.",
            "minimal_fix_hint": "Compute every output with the candidate's own kernel on each call, on the current "
            "stream, with no caching of results, side streams, threads or patched timers.",
        }
    if outcome == "timeout" and _on_cpu(result):
        return {
            "critical_issue": f"the evaluation timed out ({result.message or 'no message'})",
            "why_it_matters": "Code that does not finish is never accepted.",
            "minimal_fix_hint": "Look for a loop that never ends (wrong stride, bound or an unsigned counter "
            "going below zero) or work that grows far faster than the input (a loop nested once too often).",
        }
    if outcome == "timeout":
        return {
            "critical_issue": f"the evaluation timed out ({result.message or 'no message'})",
            "why_it_matters": "A kernel that does not finish is never accepted and blocks the GPU.",
            "minimal_fix_hint": "Look for a loop that never ends (wrong stride or bound), a __syncthreads inside a "
            "divergent branch (deadlock), or a grid far too small for the work.",
        }
    text = "\n".join(t for t in (result.traceback, result.stderr_tail, result.message) if t)
    first = first_error_text(text) or result.message or outcome
    hint = _hint_for(text)
    defaults = {
        "cuda_error": "guard every global index with the element count and check the index arithmetic and the grid size",
        "oom": "allocate less: reuse buffers, avoid materialising large intermediates",
        "crash": "find the out-of-bounds access or the bad pointer: run the kernel on a small input with bounds checks",
        "runtime_error": "fix the Python error at the line the traceback names",
    }
    hint = hint or defaults.get(outcome, "fix the first error in the log and change nothing else")
    return {
        "critical_issue": f"{outcome.replace('_', ' ')}: {first}",
        "why_it_matters": "The candidate did not produce a result, so it cannot be checked or timed.",
        "minimal_fix_hint": hint[0].upper() + hint[1:] + ".",
    }


def _reply(mode: JudgeMode, fields: dict[str, Any]) -> JudgeReply:
    if "evidence" in fields:
        fields = {**fields, "evidence": tuple(fields["evidence"])}
    return JudgeReply(mode=mode, **fields)


def _no_result(error_log: str) -> dict[str, Any]:
    """Correction fields when only an error log is at hand (no evaluation result)."""
    first = headline(error_log)
    hint = _hint_for(first or error_log) or "fix the first error in the log and change nothing else"
    return {
        "critical_issue": f"the first reported error is: {first or '(none found)'}",
        "why_it_matters": "Without an evaluation result, the error log is the only guide.",
        "minimal_fix_hint": hint[0].upper() + hint[1:] + ".",
    }


class OfflineJudge:
    """A Judge without an LLM: the same two modes and the same reply type as engine/agents/judge.Judge."""

    name = "offline"

    def correct(self, result: EvalResult | None, *, error_log: str = "") -> JudgeReply:
        """Diagnose a failed candidate from its evaluation (or, lacking one, its error log)."""
        return _reply("correct", _correction(result) if result is not None else _no_result(error_log))

    def optimize(self, analysis: Analysis | None, result: EvalResult | None = None) -> JudgeReply:
        """One optimization from the analysis's top finding (or the usual first step without counters)."""
        analysis = analysis or Analysis(gpu="", profile_ok=False, profile_message=NO_PROFILE)
        return _reply("optimize", _optimization(analysis, result))

    def recommend(self, analysis: Analysis | None, result: EvalResult | None) -> JudgeReply:
        """Correction for a failed evaluation, optimization otherwise: the mode picked as the session does."""
        if result is not None and result.outcome in _FAILED:
            return self.correct(result)
        return self.optimize(analysis, result)


def offline_fallback(
    mode: JudgeMode,
    reason: str,
    *,
    result: EvalResult | None = None,
    analysis: Analysis | None = None,
    error_log: str = "",
    error: LLMError | None = None,
    text: str = "",
    records: Sequence[CallRecord] = (),
    prompt: Prompt | None = None,
) -> JudgeReply:
    """The offline Judge's reply in the LLM Judge's mode, marked as a fallback and carrying the
    failed call's error, text, records and prompt: what the LLM Judge returns when its reply fails."""
    judge = OfflineJudge()
    reply = judge.correct(result, error_log=error_log) if mode == "correct" else judge.optimize(analysis, result)
    return replace(reply, fallback=True, fallback_reason=reason, error=error, text=text,
                   records=tuple(records), prompt=prompt)
