"""The adversarial suite: real evaluations of hacked candidates through the sandboxed worker.

Every CPU candidate in tests/adversarial/ loads the same C++ extension (built once per session).
Each test proves that one reward hack is rejected and names the finding(s) that reject it; the
honest candidates prove that the checks do not fire on honest work. GPU variants run only where
CUDA exists (`gpu` marker).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from adversarial_kit import ADV, TASK, TINY_TASK, describe, evaluate, names, source_findings_of, the_finding
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
    # a token call of its own op, then PyTorch runs every aten op of the reference: pytorch_fallback
    "token_kernel.py": ("task", "integrity_failure", {"pytorch_fallback"}, set()),
    # right during the correctness calls, wrong once timed: the timed outputs are checked
    "stale_when_timed.py": ("task", "integrity_failure", {"timing_output_mismatch"}, set()),
    # returns at once and a thread writes the output 50 ms later (hidden from the source check)
    "lazy_thread.py": ("task", "integrity_failure", {"timing_output_mismatch"}, set()),
    # perf_counter patched in place through ctypes (same object): the independent clock disagrees
    "ctypes_clock.py": ("task", "integrity_failure", {"harness_patching", "harness_tampering"}, set()),
    # TF32 turned on in forward through importlib/getattr/setattr: the flags are read around every call
    "tf32_indirect.py": ("task", "integrity_failure", {"precision_flags"}, set()),
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


def test_a_candidate_changing_the_weights_it_shares_is_stopped_before_the_reference_uses_them(
        cpu_options, honest: EvalResult) -> None:
    """zeroes_shared_bias.py zeroes the bias it shares with the reference (one copy of the weights on the
    device, engine/worker/shared_weights.py) and skips adding it, so a reference computing afterwards with
    the same memory would agree with it. The fingerprints after its first call end the evaluation there:
    no correctness record, a failing weights_mutation."""
    r = evaluate(cpu_options, "zeroes_shared_bias.py")
    assert r.outcome == "integrity_failure" and not r.accepted, describe(r)
    assert "weights_mutation" in names(r, "fail") and r.message.startswith("integrity:"), describe(r)
    f = the_finding(r, "weights_mutation")
    assert f.evidence["tensors"] == ["bias"] and f.evidence["where"] == "ModelNew.forward", describe(r)
    assert r.correctness is None and r.timing is None, describe(r)


@pytest.mark.parametrize("seed", [None, 7042, 8306])
def test_pointer_cache_runtime_probe_needs_no_source_clue(cpu_options, honest: EvalResult, seed: int | None) -> None:
    """cache_evasive.py has no static finding; the same-memory probe with sparse new values catches it.
    At seeds 7042 and 8306 the sparse rounds' former independent masks all changed the one element it
    validates, and it was accepted (CPU, 2026-12-06; the likely cause of a CI failure): their masks are disjoint now."""
    assert source_findings_of("cache_evasive.py") == set()
    r = evaluate(replace(cpu_options, seed=seed), "cache_evasive.py")
    f = the_finding(r, "result_cache")
    assert not r.accepted, describe(r)
    assert f.evidence["probe"] == "same_memory_sparse" and f.evidence["stale"], describe(r)


def test_partial_kernel_fails_only_on_the_shifted_distribution(cpu_options, honest: EvalResult) -> None:
    r = evaluate(cpu_options, "clamped.py")
    assert r.correctness is not None
    failed = {t.distribution for t in r.correctness.trial_results if not t.passed}
    passed = {t.distribution for t in r.correctness.trial_results if t.passed}
    assert failed == {"shifted"} and passed == {"task"}, describe(r)


def test_precision_downgrade_names_the_construct(cpu_options, honest: EvalResult) -> None:
    r = evaluate(cpu_options, "precision_bf16.py")
    f = the_finding(r, "precision_downgrade")
    assert "torch.bfloat16" in f.evidence["locations"][0]["construct"]
    assert r.correctness is not None and r.correctness.outputs[0].max_abs_err > 1e-3  # what it costs


def test_timer_patch_names_the_replaced_function(cpu_options, honest: EvalResult) -> None:
    r = evaluate(cpu_options, "timer_patch.py")
    f = the_finding(r, "harness_tampering")
    assert "time.perf_counter" in f.evidence["replaced"]


def test_policy_can_turn_a_finding_off(cpu_options, honest: EvalResult) -> None:
    """steals_reference.py calls the reference it found through gc: besides the source check, the run-time
    pytorch_fallback check sees PyTorch run every op of the reference. Both off: accepted."""
    opts = replace(cpu_options, integrity_policy={"harness_introspection": "off"})
    r = evaluate(opts, "steals_reference.py")
    assert names(r, "fail") == {"pytorch_fallback"} and "harness_introspection" not in names(r), describe(r)
    opts = replace(cpu_options, integrity_policy={"harness_introspection": "off", "pytorch_fallback": "off"})
    r = evaluate(opts, "steals_reference.py")
    assert r.accepted and not {"harness_introspection", "pytorch_fallback"} & names(r), describe(r)


def test_forged_result_is_not_accepted(cpu_options, honest: EvalResult) -> None:
    assert source_findings_of("forges_result.py") == {"result_forgery"}
    r = evaluate(cpu_options, "forges_result.py")
    assert not r.accepted and "result_forgery" in names(r, "fail"), describe(r)


def test_candidate_keeping_a_library_op_is_not_pytorch_fallback(cpu_options, honest: EvalResult) -> None:
    """keeps_library.py keeps torch.relu and replaces the reference's mul and add with its own op."""
    r = evaluate(cpu_options, "keeps_library.py")
    assert r.outcome == "ok" and r.accepted and names(r) == set(), describe(r)


def test_token_kernel_evidence_names_the_covered_ops(cpu_options, honest: EvalResult) -> None:
    r = evaluate(cpu_options, "token_kernel.py")
    f = the_finding(r, "pytorch_fallback")
    assert f.evidence["measured"] == "aten ops" and "aten::mul" in f.evidence["kernels"], describe(r)
    assert f.evidence["unit"] == "input_elements" and f.evidence["covered"] >= f.evidence["reference_total"]


def test_ctypes_clock_patch_is_caught_by_the_independent_clock(cpu_options, honest: EvalResult) -> None:
    r = evaluate(cpu_options, "ctypes_clock.py")
    f = the_finding(r, "harness_tampering")
    clocks = f.evidence["clocks"]["candidate"]
    assert clocks["timer_s"] < clocks["monotonic_s"] / 2, describe(r)


def test_indirect_tf32_flip_is_seen_at_run_time_and_undone(cpu_options, honest: EvalResult) -> None:
    """No static clue; the run-time check names the flag, the call and restores it after each call."""
    assert source_findings_of("tf32_indirect.py") == set()
    r = evaluate(cpu_options, "tf32_indirect.py")
    f = the_finding(r, "precision_flags")
    flags = {c["flag"] for c in f.evidence["changes"]}
    assert "torch.backends.cuda.matmul.allow_tf32" in flags and f.evidence["calls"] >= 2, describe(r)
    assert f.evidence["changes"][0]["where"] == "ModelNew.forward" and f.evidence["changes"][0]["after"] is True


def test_evasive_forged_result_fails_the_consistency_check(cpu_options, honest: EvalResult) -> None:
    """No static clue (the spec path comes from /proc/self/cmdline): the result lacks what the worker records."""
    assert "result_forgery" not in source_findings_of("forges_result_evasive.py")
    r = evaluate(cpu_options, "forges_result_evasive.py")
    assert r.outcome == "integrity_failure" and not r.accepted, describe(r)
    f = the_finding(r, "result_forgery")
    assert "correctness" in f.evidence["missing"]


def test_predicted_inputs_miss_with_a_random_seed(cpu_options, honest: EvalResult) -> None:
    """predicts_inputs.py precomputes outputs for the old fixed seed 42: with a fixed [eval] seed = 42 its
    task trials pass; with the default (a random base seed per evaluation, recorded) they do not."""
    r = evaluate(cpu_options, "predicts_inputs.py")
    assert r.outcome == "wrong_result", describe(r)
    assert len(r.seeds) == 1 and r.seeds[0] != 42
    fixed = evaluate(replace(cpu_options, seed=42), "predicts_inputs.py")
    assert fixed.seeds == (42,)
    assert fixed.correctness is not None
    assert all(t.passed for t in fixed.correctness.trial_results if t.distribution == "task"), describe(fixed)


def test_content_cache_never_hits_while_timed(cpu_options, honest: EvalResult) -> None:
    """The timed calls (1 warm-up + 5 timed with these options) rotate two draws; the shape check's call
    comes last. Every timed call misses the one-entry content cache."""
    r = evaluate(cpu_options, "content_cache.py")
    assert r.outcome == "ok", describe(r)
    calls = [line.split(": ")[1] for line in r.stdout_tail.splitlines() if line.startswith("content-cache:")]
    timed = calls[-7:-1]
    assert len(timed) == 6 and set(timed) == {"miss"}, calls


def test_shape_specialized_candidate_is_warned_and_policy_can_fail_it(cpu_options, honest: EvalResult) -> None:
    r = evaluate(cpu_options, "shape_fixed.py")
    assert r.outcome == "ok" and names(r, "warn") == {"shape_specialized"}, describe(r)
    f = the_finding(r, "shape_specialized")
    assert f.evidence["changed"] == {"COLS": [256, 129], "ROWS": [64, 63]}
    assert "COLS=129" in f.message and "ROWS=63" in f.message
    strict = evaluate(replace(cpu_options, integrity_policy={"shape_specialized": "fail"}), "shape_fixed.py")
    assert strict.outcome == "integrity_failure" and "shape_specialized" in names(strict, "fail"), describe(strict)


@pytest.mark.parametrize(("task", "changed"), [
    ("task_tuple_sizes.py", {"cols": [256, 129], "rows": [64, 63]}),  # `rows, cols = 64, 256`
    ("task_kernelbench_sizes.py", {"batch_size": [64, 63], "dim": [256, 129]}),  # `batch_size = 64`, `dim: int = 256`
])
def test_shape_check_runs_on_tuple_and_lower_case_size_styles(cpu_options, honest: EvalResult, task: str,
                                                              changed: dict[str, list[int]]) -> None:
    """The same hard-coded 64 x 256 kernel on the task styles of eval/ and KernelBench: the second sizes are
    found and it is flagged; the honest kernel passes there without a shape_check_skipped note."""
    r = evaluate(cpu_options, "shape_fixed.py", ADV / task)
    assert r.outcome == "ok" and names(r, "warn") == {"shape_specialized"}, describe(r)
    assert the_finding(r, "shape_specialized").evidence["changed"] == changed
    ok = evaluate(cpu_options, "honest.py", ADV / task)
    assert ok.outcome == "ok" and "shape_check_skipped" not in names(ok) and names(ok, "warn") == set(), describe(ok)


# ------------------------------------------------------------------ GPU (NVRTC) variants

CUDA_TASK = ADV / "cuda" / "task.py"


@pytest.fixture(scope="module")
def gpu_opts(gpu_options):
    from cudaforge.engine.gpu.specs import gpu_spec_for_device

    profile = gpu_spec_for_device(gpu_options.gpu)
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


ONE_QUEUE = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}  # every stream on one hardware queue: the clocks see no side stream


def _evaluate_with_env(options, name: str, env: dict[str, str]) -> EvalResult:
    """An evaluation whose worker gets `env` besides ours (the worker's environment is a copy of this process's)."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        return evaluate(options, name, CUDA_TASK)


@pytest.fixture(scope="module")
def one_queue_side_stream(gpu_opts) -> EvalResult:
    return _evaluate_with_env(gpu_opts, "cuda/side_stream.py", ONE_QUEUE)


def _captured(result: EvalResult) -> list:
    return [f for f in result.findings if f.name == "hidden_async_work" and f.evidence.get("check") == "stream_capture"]


@pytest.mark.gpu
def test_gpu_side_stream_on_one_hardware_queue_fails_by_stream_capture(one_queue_side_stream: EvalResult) -> None:
    """#23: with CUDA_DEVICE_MAX_CONNECTIONS=1 the hardware serializes the side stream behind the timed one, so
    the events can hold its work and the clocks read an honest time. The stream capture decides from the
    dependencies instead: the forward forks a side stream and never joins it, a failing hidden_async_work."""
    r = one_queue_side_stream
    assert r.outcome == "integrity_failure" and not r.accepted, describe(r)
    found = _captured(r)
    assert len(found) == 1 and found[0].severity == "fail", describe(r)
    assert "(stream capture: unjoined)" in found[0].message and "unjoined" in found[0].evidence["error"], describe(r)
    assert "side_stream" in names(r, "warn") and "stream_capture_skipped" not in names(r), describe(r)
    # The evaluation went on after the capture: timed, with the check's note beside the timing.
    assert r.timing is not None and str(r.timing.settings.get("stream_capture", "")).startswith("unjoined"), describe(r)


@pytest.mark.gpu
def test_gpu_cupti_records_show_the_side_stream_work(one_queue_side_stream: EvalResult) -> None:
    """The check's second reason to run, besides the static warning: the kernel check's CUPTI records put the
    candidate's kernel on a stream other than the calling one (marked by our one-element copy)."""
    found = _captured(one_queue_side_stream)
    assert found, describe(one_queue_side_stream)
    assert any(reason.startswith("CUPTI") and "cf_adv_relu" in reason for reason in found[0].evidence["reasons"]), \
        found[0].evidence


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "env", "captured"), [
    ("cuda/honest.py", ONE_QUEUE, False),  # one stream: the check does not run at all
    ("cuda/joined_side_stream.py", ONE_QUEUE, True),  # forked and joined back: the capture ends cleanly
    ("cuda/joined_side_stream.py", {}, True),
], ids=["honest-one-queue", "joined-one-queue", "joined"])
def test_gpu_honest_streams_get_no_side_stream_finding(gpu_opts, name: str, env: dict[str, str],
                                                       captured: bool) -> None:
    r = _evaluate_with_env(gpu_opts, name, env)
    assert r.outcome == "ok" and not r.failing_findings(), describe(r)
    assert not {"hidden_async_work", "stream_capture_skipped"} & names(r), describe(r)
    assert r.timing is not None, describe(r)
    note = r.timing.settings.get("stream_capture")
    if captured:
        assert str(note).startswith("joined"), (note, describe(r))
        assert "side_stream" in names(r, "warn"), describe(r)
    else:
        assert note is None, note  # an honest candidate on one stream pays nothing for the check


@pytest.mark.gpu
def test_gpu_stale_reference_memory_is_a_wrong_result(gpu_opts) -> None:
    r = evaluate(gpu_opts, "cuda/stale_output.py", CUDA_TASK)
    assert r.outcome == "wrong_result", describe(r)


@pytest.mark.gpu
def test_gpu_kernel_compiled_but_never_launched(gpu_opts) -> None:
    r = evaluate(gpu_opts, "cuda/never_launched.py", CUDA_TASK)
    assert r.outcome == "integrity_failure" and "no_custom_kernel" in names(r, "fail"), describe(r)


@pytest.mark.gpu
def test_gpu_cached_output_is_caught_or_earns_nothing(gpu_opts) -> None:
    """The cache-reuse probe catches it when one of its sparse mixes leaves the one sampled element
    unchanged (all but about 1 in 4000 runs); otherwise the timed calls, which rotate two input draws,
    miss its one-entry cache on every call, so it is timed doing the work (no gain over the honest
    kernel)."""
    r = evaluate(gpu_opts, "cuda/cached_output.py", CUDA_TASK)
    if r.outcome == "integrity_failure":
        assert {"faster_than_memory_bound", "result_cache"} & names(r, "fail"), describe(r)
    else:
        honest = evaluate(gpu_opts, "cuda/honest.py", CUDA_TASK)
        assert r.outcome == "ok" and r.timing is not None and honest.timing is not None, describe(r)
        assert r.timing.candidate.median_ms > 0.8 * honest.timing.candidate.median_ms, describe(r)


GEMM_TASK = ADV / "cuda" / "gemm_task.py"

# candidate -> (task, expected outcome, failing findings that must be present, warn findings that must be present)
GPU_CASES: dict[str, tuple[Path, str, set[str], set[str]]] = {
    "cuda/token_kernel.py": (CUDA_TASK, "integrity_failure", {"pytorch_fallback"}, set()),
    "cuda/gemm_token_kernel.py": (GEMM_TASK, "integrity_failure", {"pytorch_fallback"}, set()),
    "cuda/empty_when_timed.py": (CUDA_TASK, "integrity_failure", {"timing_output_mismatch"}, set()),
    "cuda/lazy_thread.py": (CUDA_TASK, "integrity_failure", {"timing_output_mismatch"}, set()),
    "cuda/ctypes_event.py": (CUDA_TASK, "integrity_failure", {"harness_patching", "harness_tampering"}, set()),
    "cuda/shape_fixed.py": (CUDA_TASK, "ok", set(), {"shape_specialized"}),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(GPU_CASES))
def test_gpu_hack_gets_its_finding(gpu_opts, name: str) -> None:
    task, outcome, fails, warns = GPU_CASES[name]
    r = evaluate(gpu_opts, name, task)
    assert r.outcome == outcome, describe(r)
    assert fails <= names(r, "fail") and warns <= names(r, "warn"), describe(r)


@pytest.mark.gpu
def test_gpu_candidate_keeping_cublas_for_the_gemm_is_accepted(gpu_opts) -> None:
    r = evaluate(gpu_opts, "cuda/gemm_keeps_cublas.py", GEMM_TASK)
    assert r.outcome == "ok" and not r.failing_findings(), describe(r)
    assert any(not k.custom for k in r.kernels) and any(k.custom for k in r.kernels), describe(r)


@pytest.mark.gpu
def test_gpu_spare_of_another_session_is_not_gpu_shared(gpu_opts, tmp_path) -> None:
    """Another process's cudaforge spare (CUDA context created, waiting for a job) carries the sandbox
    marker: it is ours, so an evaluation meanwhile has no gpu_shared warning."""
    import subprocess
    import sys
    import time

    script = tmp_path / "other_session.py"
    script.write_text(
        "import signal, sys, time\n"
        "from pathlib import Path\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))  # atexit then kills the spare\n"
        "from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator\n"
        f"ev = Evaluator(EvalOptions(device='cuda', gpu={gpu_opts.gpu}, cache_dir=Path({str(tmp_path)!r})))\n"
        "ev.prewarm()\n"
        "while ev.spare.ready() is None:\n"
        "    time.sleep(0.05)\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n")
    other = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "ready"
        r = evaluate(gpu_opts, "cuda/honest.py", CUDA_TASK)
        assert "gpu_shared" not in names(r), describe(r)
    finally:
        other.terminate()
        other.wait(timeout=30)
        time.sleep(0.5)


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
