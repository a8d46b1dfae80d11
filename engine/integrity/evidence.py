"""Runtime findings from the evidence the worker's pipeline gathers (engine/worker/pipeline.py).

The pipeline records what happened (which inputs changed, which outputs share memory, which kernels ran,
the host and event times, the harness's functions before and after, the threads left running); these
functions decide what of it is a finding. torch is imported lazily, and only by `harness_identity`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cudaforge.engine.integrity.registry import finding
from cudaforge.engine.results import Finding
from cudaforge.engine.speed_of_light import byte_floor_ms


def correctness_findings(mutated: Iterable[int], aliased: bool, subclass_types: Iterable[str]) -> list[Finding]:
    """From the correctness trials: inputs the candidate changed (the reference's copy unchanged), outputs
    that are views of inputs (the reference's are new memory), outputs that are tensor subclasses."""
    out = []
    mutated, subclass_types = sorted(mutated), sorted(subclass_types)
    if mutated:
        out.append(finding("input_mutation", f"the candidate changed input(s) {mutated} "
                           "that the reference leaves unchanged", {"inputs": mutated}))
    if aliased:
        out.append(finding("output_aliases_input", "the candidate returns a view of an input; the "
                           "reference returns new memory", {}))
    if subclass_types:
        out.append(finding("tensor_subclass_output", "outputs are tensor subclasses, which can compute "
                           "lazily or on comparison", {"types": subclass_types}))
    return out


def custom_code_finding(ran_custom: bool, launched: list[str]) -> Finding | None:
    """`no_custom_kernel` when neither a custom kernel nor an extension function ran during forward."""
    if ran_custom:
        return None
    return finding("no_custom_kernel", "no custom kernel or extension function ran during "
                   "ModelNew.forward; PyTorch did the work", {"launched": launched[:10]})


def hidden_work_finding(host_ref: Any, host_cand: Any, ev_ref: Any, ev_cand: Any) -> Finding | None:
    """Events on the current stream miss side-stream or threaded work; device-wide sync does not. Both
    come from the same synchronized calls, so our launch latency is in both and cancels."""
    excess = (host_cand.median_ms - ev_cand.median_ms) - (host_ref.median_ms - ev_ref.median_ms)
    if excess <= max(0.02, 0.2 * host_cand.median_ms):
        return None
    return finding(
        "hidden_async_work",
        f"device-synchronized time exceeds CUDA-event time by {excess * 1e3:.1f} µs more than the reference's: "
        "work runs outside the timed stream (side stream or thread)",
        {"event_candidate_ms": ev_cand.median_ms, "host_candidate_ms": host_cand.median_ms,
         "event_reference_ms": ev_ref.median_ms, "host_reference_ms": host_ref.median_ms,
         "host_speedup": host_ref.median_ms / host_cand.median_ms if host_cand.median_ms else None})


# Noisy timing (`noisy_timing`): the defaults of `[timing] noise_threshold` and `noise_retries` (engine/config.py).
NOISE_THRESHOLD = 0.25  # IQR / median of either side above which a timing is no result
NOISE_RETRIES = 2  # re-measurements before a noisy timing is reported as such


def is_noisy(reference: Any, candidate: Any, threshold: float) -> bool:
    """Either side's spread (TimingStats.spread: IQR / median) over the threshold (0 turns the rule off)."""
    return threshold > 0 and max(reference.spread, candidate.spread) > threshold


def noisy_timing_finding(reference: Any, candidate: Any, threshold: float, measurements: int) -> Finding | None:
    """`noisy_timing` when the last of `measurements` timings is still noisy: the speedup is no result."""
    if not is_noisy(reference, candidate, threshold):
        return None
    ref, cand = reference.spread, candidate.spread
    return finding("noisy_timing",
                   f"the timing stayed noisy after {measurements} measurement(s): spread (IQR / median) reference "
                   f"{ref:.2f}, candidate {cand:.2f}, over the threshold {threshold:g}; the speedup is no result",
                   {"reference_spread": round(ref, 4), "candidate_spread": round(cand, 4), "threshold": threshold,
                    "measurements": measurements})


TIMER_TOLERANCE = 0.15  # the CUDA events may report this much less than the kernels' busy time


def timer_disagreement_finding(event_ms: float, busy_ms: float, reference_event_ms: float | None = None,
                               reference_busy_ms: float | None = None) -> Finding | None:
    """`timer_disagreement`: the candidate's CUDA-event median is below the union of its kernels' CUPTI
    intervals (median over the host-timed calls) by more than TIMER_TOLERANCE. Events above the busy time
    are launch gaps and overhead: no finding."""
    if busy_ms <= 0 or event_ms >= busy_ms * (1 - TIMER_TOLERANCE):
        return None
    return finding("timer_disagreement",
                   f"the CUDA events say {event_ms * 1e3:.1f} µs, the kernels were busy {busy_ms * 1e3:.1f} µs "
                   f"(CUPTI, every stream): {1 - event_ms / busy_ms:.0%} less, over {TIMER_TOLERANCE:.0%}",
                   {"event_candidate_ms": event_ms, "cupti_busy_candidate_ms": busy_ms,
                    "event_reference_ms": reference_event_ms, "cupti_busy_reference_ms": reference_busy_ms,
                    "ratio": event_ms / busy_ms, "tolerance": TIMER_TOLERANCE})


def speed_of_light_finding(cand_ms: float, nbytes: int, bandwidth_gbs: float, margin: float) -> Finding | None:
    """`faster_than_memory_bound`: faster than moving the inputs, parameters and outputs once at peak
    bandwidth (the speed of light's byte floor: one rule, in engine/speed_of_light.py)."""
    floor_ms = byte_floor_ms(nbytes, bandwidth_gbs)
    if cand_ms * margin >= floor_ms:
        return None
    return finding("faster_than_memory_bound",
                   f"{cand_ms * 1e3:.1f} µs is below the {floor_ms * 1e3:.1f} µs needed to move "
                   f"{nbytes / 1e6:.1f} MB once at {bandwidth_gbs:.0f} GB/s",
                   {"candidate_ms": cand_ms, "floor_ms": floor_ms, "bytes": nbytes, "peak_gbs": bandwidth_gbs})


def subclass_finding(task: Any, module_new: Any) -> Finding | None:
    """`subclasses_reference`: ModelNew is a subclass of the task's Model (it may inherit its forward)."""
    model_cls = getattr(task, "Model", None)
    new_cls = getattr(module_new, "ModelNew", None)
    if isinstance(model_cls, type) and isinstance(new_cls, type) and issubclass(new_cls, model_cls):
        return finding("subclasses_reference", "ModelNew subclasses the reference Model", {})
    return None


def harness_identity() -> dict[str, int]:
    """The identities of the timers, syncs, events and comparisons the harness relies on (taken before
    the candidate is imported and again at the end: `tampering_finding`)."""
    import time as _time

    import torch

    ids = {"time.perf_counter": id(_time.perf_counter), "time.time": id(_time.time)}
    if torch.cuda.is_available():
        ids.update({"torch.cuda.synchronize": id(torch.cuda.synchronize), "torch.cuda.Event": id(torch.cuda.Event),
                    "torch.cuda.Event.elapsed_time": id(torch.cuda.Event.elapsed_time),
                    "torch.cuda.Event.record": id(torch.cuda.Event.record)})
    ids["torch.allclose"] = id(torch.allclose)
    ids["torch.equal"] = id(torch.equal)
    return ids


def tampering_finding(before: Mapping[str, int], after: Mapping[str, int]) -> Finding | None:
    """`harness_tampering`: a function of the harness was replaced while the candidate ran."""
    changed = [k for k, v in after.items() if before.get(k) != v]
    if not changed:
        return None
    return finding("harness_tampering", f"the candidate replaced {', '.join(changed)}", {"replaced": changed})


def threads_finding(extra_threads: set[str]) -> Finding | None:
    """`background_threads`: threads the candidate started are still running after it returned."""
    if not extra_threads:
        return None
    return finding("background_threads", "the candidate started threads that keep running: "
                   + ", ".join(sorted(extra_threads)[:5]), {"threads": sorted(extra_threads)})
