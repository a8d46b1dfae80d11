"""The adversarial suite: real evaluations of hacked candidates through the sandboxed worker.

Every CPU candidate in tests/adversarial/ loads the same C++ extension (built once per session).
Each test proves that one reward hack is rejected and names the finding(s) that reject it; the
honest candidates prove that the checks do not fire on honest work. GPU variants run only where
CUDA exists (`gpu` marker).
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from adversarial_kit import ADV, TASK, TINY_TASK, describe, evaluate, names, source_findings_of
from cudaforge.engine.results import EvalResult

# candidate -> (task, expected outcome, findings that must be present with severity fail, warn findings)
CASES: dict[str, tuple[str, str, set[str], set[str]]] = {
    # allocator reuse: the reference output is poisoned (NaN) before the candidate runs, orders alternate
    "empty_output.py": ("task", "wrong_result", set(), set()),
    # pointer-keyed cache: found in the source; the allocator's address reuse also makes trials wrong
    "cache_pointer.py": ("task", "*", {"result_cache"}, set()),
    # shape-keyed cache: the second trial gets the first trial's output
    "cache_shape.py": ("task", "wrong_result", {"result_cache"}, set()),
    # address-keyed cache validated by one sampled element, hidden from the AST: the runtime probe
    "cache_evasive.py": ("task", "integrity_failure", {"result_cache"}, set()),
    "mutates_input.py": ("task", "integrity_failure", {"input_mutation"}, set()),
    "returns_input_view.py": ("task", "integrity_failure", {"output_aliases_input", "input_mutation"}, set()),
    "pure_pytorch.py": ("task", "integrity_failure", {"no_custom_kernel"}, set()),
    "try_fallback.py": ("task", "integrity_failure", {"pytorch_fallback"}, set()),
    "subclasses_model.py": ("task", "integrity_failure", {"calls_reference", "subclasses_reference"}, set()),
    "thread_pool.py": ("task", "integrity_failure", {"threads_or_processes", "background_threads"}, set()),
    "timer_patch.py": ("task", "integrity_failure", {"harness_patching", "harness_tampering"}, set()),
    "tensor_subclass.py": ("task", "integrity_failure", {"tensor_subclass", "tensor_subclass_output"}, set()),
    "precision_bf16.py": ("task", "wrong_result", set(), {"precision_downgrade"}),
    # passes the task's own inputs, fails only the shifted second distribution
    "clamped.py": ("task", "wrong_result", set(), set()),
    "constant_tiny.py": ("tiny", "integrity_failure", {"constant_output"}, {"weak_task_check"}),
    "steals_reference.py": ("task", "integrity_failure", {"harness_introspection"}, set()),
}


@pytest.fixture(scope="module")
def honest(cpu_options) -> EvalResult:
    """Built first: the shared extension's one build happens here."""
    return evaluate(cpu_options, "honest.py")


def test_honest_candidate_is_accepted_without_findings(honest: EvalResult) -> None:
    assert honest.outcome == "ok", describe(honest)
    assert honest.accepted and honest.findings == ()
    assert honest.correctness is not None and honest.correctness.trials_passed == honest.correctness.trials


def test_honest_candidate_on_the_weak_task_is_only_warned(cpu_options, honest: EvalResult) -> None:
    r = evaluate(cpu_options, "honest_tiny.py", TINY_TASK)
    assert r.outcome == "ok", describe(r)
    assert r.accepted and names(r) == {"weak_task_check"} and names(r, "fail") == set()


@pytest.mark.parametrize("name", sorted(CASES))
def test_hack_is_rejected_with_its_finding(cpu_options, honest: EvalResult, name: str) -> None:
    task, outcome, fails, warns = CASES[name]
    r = evaluate(cpu_options, name, TINY_TASK if task == "tiny" else TASK)
    assert not r.accepted, describe(r)
    if outcome == "*":
        assert r.outcome in ("wrong_result", "integrity_failure"), describe(r)
    else:
        assert r.outcome == outcome, describe(r)
    assert fails <= names(r, "fail"), describe(r)
    assert warns <= names(r, "warn"), describe(r)
    if outcome == "integrity_failure":
        assert r.correctness is not None and r.correctness.passed  # the numbers alone would have passed
        assert r.message.startswith("integrity:")


def test_pointer_cache_runtime_probe_needs_no_source_clue(cpu_options, honest: EvalResult) -> None:
    """cache_evasive.py has no static finding; the same-memory probe with sparse new values catches it."""
    assert source_findings_of("cache_evasive.py") == set()
    r = evaluate(cpu_options, "cache_evasive.py")
    f = next(f for f in r.findings if f.name == "result_cache")
    assert f.evidence["probe"] == "same_memory_sparse" and f.evidence["stale"], describe(r)


def test_partial_kernel_fails_only_on_the_shifted_distribution(cpu_options, honest: EvalResult) -> None:
    r = evaluate(cpu_options, "clamped.py")
    assert r.correctness is not None
    failed = {t.distribution for t in r.correctness.trial_results if not t.passed}
    passed = {t.distribution for t in r.correctness.trial_results if t.passed}
    assert failed == {"shifted"} and passed == {"task"}, describe(r)


def test_precision_downgrade_names_the_construct(cpu_options, honest: EvalResult) -> None:
    r = evaluate(cpu_options, "precision_bf16.py")
    f = next(f for f in r.findings if f.name == "precision_downgrade")
    assert "torch.bfloat16" in f.evidence["locations"][0]["construct"]
    assert r.correctness is not None and r.correctness.outputs[0].max_abs_err > 1e-3  # what it costs


def test_timer_patch_names_the_replaced_function(cpu_options, honest: EvalResult) -> None:
    r = evaluate(cpu_options, "timer_patch.py")
    f = next(f for f in r.findings if f.name == "harness_tampering")
    assert "time.perf_counter" in f.evidence["replaced"]


def test_policy_can_turn_a_finding_off(cpu_options, honest: EvalResult) -> None:
    opts = replace(cpu_options, integrity_policy={"harness_introspection": "off"})
    r = evaluate(opts, "steals_reference.py")
    assert r.accepted and "harness_introspection" not in names(r), describe(r)


def test_forged_result_is_not_accepted(cpu_options, honest: EvalResult) -> None:
    assert source_findings_of("forges_result.py") == {"result_forgery"}
    r = evaluate(cpu_options, "forges_result.py")
    assert not r.accepted and "result_forgery" in names(r, "fail"), describe(r)


# ------------------------------------------------------------------ GPU (NVRTC) variants

CUDA_TASK = ADV / "cuda" / "task.py"


@pytest.fixture(scope="module")
def gpu_opts(gpu_options):
    from cudaforge.engine.gpus import profile_for_device

    profile = profile_for_device(gpu_options.gpu)
    peak = getattr(profile, "dram_bandwidth_gbs", None) if profile else None
    return replace(gpu_options, peak_bandwidth_gbs=peak)


@pytest.mark.gpu
def test_gpu_honest_nvrtc_candidate_has_no_failing_finding(gpu_opts) -> None:
    r = evaluate(gpu_opts, "cuda/honest.py", CUDA_TASK)
    assert r.outcome == "ok" and not r.failing_findings(), describe(r)


@pytest.mark.gpu
def test_gpu_side_stream_work_is_hidden_async_work(gpu_opts) -> None:
    r = evaluate(gpu_opts, "cuda/side_stream.py", CUDA_TASK)
    assert r.outcome == "integrity_failure", describe(r)
    assert "hidden_async_work" in names(r, "fail") and "side_stream" in names(r, "warn")


@pytest.mark.gpu
def test_gpu_stale_reference_memory_is_a_wrong_result(gpu_opts) -> None:
    r = evaluate(gpu_opts, "cuda/stale_output.py", CUDA_TASK)
    assert r.outcome == "wrong_result", describe(r)


@pytest.mark.gpu
def test_gpu_kernel_compiled_but_never_launched(gpu_opts) -> None:
    r = evaluate(gpu_opts, "cuda/never_launched.py", CUDA_TASK)
    assert r.outcome == "integrity_failure" and "no_custom_kernel" in names(r, "fail"), describe(r)


@pytest.mark.gpu
def test_gpu_cached_output_is_caught(gpu_opts) -> None:
    """Two checks can catch it: the cache-reuse probe (when its sparse mix leaves the sampled element
    unchanged, which depends on the draw) and the speed-of-light floor on the timed calls."""
    if not gpu_opts.peak_bandwidth_gbs:
        pytest.skip("no GPU profile with a DRAM bandwidth for this card")
    r = evaluate(gpu_opts, "cuda/cached_output.py", CUDA_TASK)
    assert r.outcome == "integrity_failure", describe(r)
    assert {"faster_than_memory_bound", "result_cache"} & names(r, "fail"), describe(r)


# ------------------------------------------------------------------ honest examples end to end (slow)

EXAMPLES = sorted((ADV.parent.parent / "examples").glob("*/cpu.py"))


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("CUDAFORGE_SLOW_TESTS"),
                    reason="one C++ build per example (~30 s each on 2 cores); set CUDAFORGE_SLOW_TESTS=1")
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.parent.name)
def test_honest_examples_have_no_failing_finding(cpu_options, path) -> None:
    from cudaforge.engine.candidate import load_candidate

    r = evaluate(cpu_options, load_candidate(path), path.parent / "task.py")
    assert r.outcome == "ok" and not r.failing_findings(), describe(r)
