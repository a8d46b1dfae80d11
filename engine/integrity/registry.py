"""The one registry of integrity findings: every name with its default severity and its message.

Every check builds its findings through `finding(name, ...)`, so a name that is not registered fails at
once in the tests rather than slipping past `[integrity] policy`; engine/config.py rejects a policy
that names an unknown finding, and `apply_policy` (the app) applies the user's policy and, where the
policy is silent, the default severity. Standard library only: the app and the worker both import it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from cudaforge.engine.results import Finding, Severity


@dataclass(frozen=True)
class FindingKind:
    """One finding name. `fixed`: the severity never depends on the evidence, so the app enforces the
    default on whatever the worker reported (a forged "warn" on a `fail` finding does not stand)."""

    name: str
    severity: Severity
    message: str
    where: str  # static (the source), runtime (the worker) or app
    fixed: bool = True


_KINDS = (
    # Static: the candidate's source, before any of it runs (static.py).
    FindingKind("pytorch_fallback", "fail",
                "an exception handler in ModelNew's code path falls back to PyTorch ops", "static"),
    FindingKind("calls_reference", "fail",
                "the candidate uses the reference Model or imports the task module", "static"),
    FindingKind("threads_or_processes", "fail", "the candidate starts threads or processes", "static"),
    FindingKind("side_stream", "warn",
                "the candidate creates or uses a non-default CUDA stream (the stream-capture and timing checks "
                "decide whether work escapes the timed stream)", "static"),
    FindingKind("harness_patching", "fail",
                "the candidate assigns to attributes of modules the harness relies on "
                "(timers, torch, builtins, sys.modules) or writes into Python objects through ctypes", "static"),
    FindingKind("harness_introspection", "fail",
                "the candidate inspects the caller's frames or the garbage collector's objects, "
                "which can reach the reference model or its outputs", "static"),
    FindingKind("tensor_subclass", "fail",
                "the candidate defines tensor subclasses or torch function/dispatch overrides", "static"),
    FindingKind("result_cache", "fail",
                "ModelNew returns outputs stored in a cache keyed on pointers, ids, shapes or hashes", "static"),
    FindingKind("precision_downgrade", "warn",
                "the candidate computes in reduced precision (fp16/bf16/TF32) on an fp32 task; "
                "its cost in accuracy is the correctness max error", "static"),
    FindingKind("result_forgery", "fail",
                "the candidate reads the worker's command line or names the worker's spec/result files, "
                "which lets it write its own verdict", "static"),
    # Runtime: what actually happened in the worker (runtime.py, outputs.py).
    FindingKind("input_mutation", "fail",
                "the candidate changed an input that the reference leaves unchanged", "runtime"),
    FindingKind("output_aliases_input", "fail",
                "an output shares memory with an input (the reference returns new memory)", "runtime"),
    FindingKind("tensor_subclass_output", "fail",
                "an output is a tensor subclass, which can compute lazily or on comparison", "runtime"),
    FindingKind("subclasses_reference", "fail", "ModelNew subclasses the reference Model", "runtime"),
    FindingKind("weights_mutation", "fail",
                "the candidate changed parameters or buffers it shares with the reference (one copy of the "
                "weights on the device for both)", "runtime"),
    FindingKind("no_custom_kernel", "fail",
                "no custom kernel launched and no extension function ran during forward", "runtime"),
    FindingKind("timing_output_mismatch", "fail",
                "an output of a timed call differs from the reference's for the same inputs", "runtime"),
    FindingKind("shape_specialized", "warn",
                "at a second set of the task's sizes the candidate is wrong, crashes or refuses", "runtime"),
    FindingKind("shape_check_skipped", "info", "the second-sizes check could not run", "runtime"),
    FindingKind("constant_output", "fail",
                "an output is one repeated value where the reference's values vary", "runtime"),
    FindingKind("inconsistent_output", "fail",
                "wrong on a later call with new values in the same memory, though earlier calls were right",
                "runtime", fixed=False),  # warn for the sparse probe
    FindingKind("weak_task_check", "warn",
                "one fixed value per output would pass this task's check at the tolerance in use", "runtime"),
    FindingKind("hidden_async_work", "fail",
                "work runs outside the timed stream: device-synchronized time exceeds CUDA-event time, or the "
                "forward leaves work on a side stream that the calling stream does not wait for (stream capture)",
                "runtime"),
    FindingKind("stream_capture_skipped", "info",
                "the side-stream check (one forward under CUDA stream capture) could not decide; the timing "
                "checks alone judge the candidate's side streams", "runtime"),
    FindingKind("faster_than_memory_bound", "fail",
                "faster than reading the inputs and writing the outputs once at peak bandwidth", "runtime"),
    FindingKind("harness_tampering", "fail",
                "a timer, sync, event or comparison function of the harness was replaced", "runtime"),
    FindingKind("background_threads", "fail",
                "the candidate started threads that keep running", "runtime"),
    FindingKind("timer_disagreement", "warn",
                "the CUDA events report less time than the kernels' own busy time (CUPTI) by more than 15%",
                "runtime"),
    FindingKind("noisy_timing", "warn",
                "the timing stayed noisy after re-measuring (IQR / median over the threshold): not a result",
                "runtime"),
    FindingKind("precision_flags", "fail",
                "a candidate call changed the backend numerics flags (TF32, matmul precision, reduced-precision "
                "reductions)", "runtime"),
    # App: what the app sees around the worker (engine/evaluation/evaluator.py).
    FindingKind("gpu_shared", "warn", "other processes use the GPU; timings may be disturbed", "app"),
)

REGISTRY: Mapping[str, FindingKind] = {k.name: k for k in _KINDS}
POLICIES = ("fail", "warn", "off")


def finding(name: str, message: str | None = None, evidence: Mapping[str, Any] | None = None, *,
            severity: Severity | None = None) -> Finding:
    """A registered finding: the registry's severity unless the check says otherwise (`fixed=False` kinds
    only), and the registry's message unless the check has a more precise one."""
    kind = REGISTRY[name]  # an unregistered name is a programming error: KeyError
    if severity is not None and severity != kind.severity and kind.fixed:
        raise ValueError(f"finding {name!r} has the fixed severity {kind.severity!r}, not {severity!r}")
    return Finding(name, severity or kind.severity, message if message is not None else kind.message,
                   dict(evidence or {}))


def unknown_names(names: Iterable[str]) -> list[str]:
    """The names that the registry does not know (a typo in `[integrity] policy`)."""
    return [n for n in names if n not in REGISTRY]


def apply_policy(findings: tuple[Finding, ...], policy: Mapping[str, str]) -> tuple[Finding, ...]:
    """The user's `[integrity] policy` (fail | warn | off per name), else the registry's fixed defaults."""
    out = []
    for f in findings:
        kind = REGISTRY.get(f.name)
        level = policy.get(f.name) or (kind.severity if kind is not None and kind.fixed else None)
        if level == "off":
            continue
        if level in ("fail", "warn") and level != f.severity:
            f = replace(f, severity=level)  # type: ignore[arg-type]
        out.append(f)
    return tuple(out)
