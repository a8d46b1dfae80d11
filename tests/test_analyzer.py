"""Roofline/occupancy classification on the real H200 fixtures, the offline Judge, the text report,
and the analysis's dict round trip."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from cudaforge.engine.agents.offline_judge import OfflineJudge
from cudaforge.engine.gpu.specs import detect_gpu_spec, gpu_spec_from_properties
from cudaforge.engine.profiling import (
    NcuSettings,
    ProfileResult,
    interpret_output,
    parse_query_metrics,
    plan_metrics,
)
from cudaforge.engine.profiling.analysis import (
    COMPUTE_BOUND,
    LATENCY_BOUND,
    LAUNCH_BOUND,
    MEMORY_BOUND,
    Analysis,
    analyze,
)
from cudaforge.engine.profiling.render import format_profile
from cudaforge.engine.results import (
    CompileResult,
    Correctness,
    EvalResult,
    Finding,
    KernelLaunch,
    OutputCheck,
    WorstElement,
)

FIX = Path(__file__).parent / "fixtures" / "ncu"
H200 = detect_gpu_spec("NVIDIA H200", (9, 0))
OPTIMIZE_KEYS = ("bottleneck", "method", "plan", "evidence")
CORRECT_KEYS = ("critical_issue", "why_it_matters", "minimal_fix_hint")


def load(name: str) -> ProfileResult:
    avail = parse_query_metrics((FIX / "query_metrics_gh100.txt").read_text(encoding="utf-8"))
    plan = plan_metrics(NcuSettings().metrics(), avail)
    text = (FIX / name).read_text(encoding="utf-8")
    return interpret_output(text, "", returncode=0, timed_out=False, plan=plan, chip="gh100")


@pytest.fixture(scope="module")
def three() -> ProfileResult:
    return load("ncu_raw_three_kernels.csv")


@pytest.fixture(scope="module")
def analysis(three: ProfileResult) -> Analysis:
    return analyze(three, H200)


def _kernel(analysis: Analysis, short: str):  # noqa: ANN202
    return next(k for k in analysis.kernels if k.short_name.startswith(short))


def test_elementwise_kernel_is_memory_bound(analysis: Analysis) -> None:
    k = _kernel(analysis, "cf_scale")
    assert k.bottleneck == MEMORY_BOUND
    assert k.arithmetic_intensity is not None and k.arithmetic_intensity < 1  # far below the ridge (~14)
    assert k.ridge_point == pytest.approx(67 / 4.8)
    assert k.dram_gbs == pytest.approx(2306.4, rel=1e-3)
    assert k.dram_pct_of_peak == pytest.approx(2306.4 / 4800 * 100, rel=1e-3)
    assert k.theoretical_occupancy_pct == 100
    names = [f.name for f in k.findings]
    assert names[0] == "dram_bandwidth"  # not "the caches": DRAM is at 48%, the stream is DRAM-limited
    assert "stall_long_scoreboard" not in names  # folded into the bandwidth finding's evidence
    ev = {e.metric for e in k.findings[0].evidence}
    assert "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct" in ev
    assert "float4" in k.findings[0].recommendation


def test_heavy_kernel_is_occupancy_bound_by_registers(analysis: Analysis) -> None:
    k = _kernel(analysis, "cf_heavy")
    assert k.bottleneck == LATENCY_BOUND
    assert k.theoretical_occupancy_pct == pytest.approx(37.5)
    assert k.blocks_per_sm == 3
    # Shared memory also reports 3 blocks, but only because the driver sized the carveout to the
    # register limit: at the full 228 KB, 41 KB blocks would fit 5.
    assert k.occupancy_limiters == ("registers",)
    occ = k.findings[0]
    assert occ.name == "occupancy"
    assert "64/thread" in occ.recommendation and "__launch_bounds__(256, 4)" in occ.recommendation
    assert "5 blocks" in occ.title


def test_cublas_matmul_is_compute_bound_without_tensor_cores(analysis: Analysis) -> None:
    k = _kernel(analysis, "cutlass::Kernel2")
    assert k.bottleneck == COMPUTE_BOUND
    assert k.fp32_tflops == pytest.approx(2 * 8_589_934_592 / 342.656e-6 / 1e12, rel=1e-2)
    assert k.fp32_pct_of_peak == pytest.approx(k.fp32_tflops / 67 * 100)
    assert k.waves == pytest.approx(0.97)
    top = k.findings[0]
    assert top.name == "tensor_cores_idle"
    assert "3xTF32" in top.recommendation  # FP32 tolerance: plain TF32 would fail correctness
    assert "sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active" in top.metrics
    assert any(f.name == "grid_too_small" for f in k.findings)  # 128 blocks on 132 SMs


def test_findings_are_ranked_and_carry_checkable_evidence(three: ProfileResult, analysis: Analysis) -> None:
    scores = [f.score for f in analysis.findings]
    assert scores == sorted(scores, reverse=True)
    assert analysis.findings[0].kernel == "cf_heavy"  # 85% of the time
    by_launch = {k.launch_id: k for k in three.kernels}
    for f in analysis.findings:
        assert f.recommendation and f.title and f.evidence
        kernel = by_launch[f.launch_id]
        for e in f.evidence:
            if e.metric.startswith("derived:"):
                continue
            assert e.metric in kernel.metrics, e.metric  # evidence names real columns
            assert e.value == kernel.metrics[e.metric].value
    assert any("measured as" in n for n in analysis.notes)  # the substitutions are disclosed
    json.dumps(analysis.to_dict())


def test_tiny_kernel_is_launch_overhead_bound() -> None:
    a = analyze(load("ncu_raw_failed_target.csv"), H200)
    (k,) = a.kernels
    assert k.bottleneck == LAUNCH_BOUND and k.findings[0].name == "tiny_launch"


def test_duration_only_profile_does_not_crash() -> None:
    # That run asked only for the duration; launch__* and the theoretical occupancy come anyway.
    a = analyze(load("ncu_raw_bad_metric.csv"), H200)
    assert len(a.kernels) == 7
    assert _kernel(a, "at::reduce_kernel").bottleneck == LAUNCH_BOUND  # 3.9 us
    heavy = _kernel(a, "cf_heavy")
    assert heavy.bottleneck == "unknown" and heavy.reason == "no throughput metrics"
    assert heavy.findings[0].name == "occupancy"  # still found from the launch metrics
    assert a.findings[0].kernel == "cf_heavy"


def test_unknown_gpu_profile_degrades_gracefully(three: ProfileResult) -> None:
    gpu = gpu_spec_from_properties("Mystery GPU", (9, 0), {"multi_processor_count": 132})
    a = analyze(three, gpu)
    assert _kernel(a, "cf_heavy").bottleneck == LATENCY_BOUND
    assert any("lacks" in n for n in a.notes)


# --- heuristic Judge ------------------------------------------------------------------------


def recommend(analysis: Analysis, result: EvalResult | None = None) -> dict[str, object]:
    """The offline Judge's reply as its mode and JSON fields (the LLM Judge's `fields()`)."""
    reply = OfflineJudge().recommend(analysis, result)
    return {"mode": reply.mode, **reply.fields()}


def _eval(**kw: object) -> EvalResult:
    base: dict[str, object] = {
        "outcome": "ok",
        "accepted": True,
        "task_path": "t.py",
        "candidate_hash": "h",
        "format": "nvrtc",
        "device": "cuda",
    }
    base.update(kw)
    return EvalResult(**base)  # type: ignore[arg-type]


def test_optimization_mode_from_top_finding(three: ProfileResult, analysis: Analysis) -> None:
    rec = recommend(analysis, _eval())
    assert rec["mode"] == "optimize"
    assert all(isinstance(rec[k], str) and rec[k] for k in OPTIMIZE_KEYS[:3])
    assert "cf_heavy" in rec["bottleneck"] and "37.5" in rec["bottleneck"]
    assert rec["method"] == "raise occupancy"
    names = {m for k in three.kernels for m in k.metrics}
    assert rec["evidence"] and set(rec["evidence"]) <= names


def test_library_kernel_plan_says_so(three: ProfileResult) -> None:
    only_gemm = replace(three, kernels=three.kernels[2:])
    rec = recommend(
        analyze(only_gemm, H200),
        _eval(
            kernels=(
                KernelLaunch(
                    "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(T1::Params)",
                    1,
                    340.0,
                    1.0,
                    False,
                ),
            )
        ),
    )
    assert "launched by PyTorch" in rec["plan"] and rec["method"] == "move the matrix math to tensor cores"


def test_without_metrics_still_answers() -> None:
    empty = analyze(ProfileResult(ok=False, error_kind="permission_denied", message="no counters"), H200)
    rec = recommend(empty)
    assert rec["mode"] == "optimize" and "no counters" in rec["bottleneck"] and rec["evidence"] == []


def test_compile_error_correction() -> None:
    log = (
        "kernel.cu(12): warning: variable unused\n"
        'kernel.cu(17): error: identifier "blockIdxx" is undefined\n1 error detected'
    )
    rec = recommend(
        Analysis(gpu="x"),
        _eval(
            outcome="compile_error", accepted=False, compile=CompileResult(ok=False, format="nvrtc", log=log)
        ),
    )
    assert rec["mode"] == "correct" and set(CORRECT_KEYS) <= set(rec)
    assert "blockIdxx" in rec["critical_issue"] and "kernel.cu(17)" in rec["critical_issue"]
    assert "declare or include" in rec["minimal_fix_hint"].lower()


def _wrong(output: OutputCheck) -> EvalResult:
    corr = Correctness(passed=False, trials=5, trials_passed=0, atol=1e-4, rtol=1e-4, outputs=(output,))
    return _eval(outcome="wrong_result", accepted=False, correctness=corr, message="output 0 differs")


def test_wrong_shape_correction() -> None:
    o = OutputCheck(
        index=0,
        passed=False,
        shape_expected=(16, 32),
        shape_got=(16,),
        dtype_expected="float32",
        dtype_got="float32",
        reason="shape",
    )
    rec = recommend(Analysis(gpu="x"), _wrong(o))
    assert "[16]" in rec["critical_issue"] and "[16, 32]" in rec["critical_issue"]


def test_tail_mismatch_correction() -> None:
    o = OutputCheck(
        index=0,
        passed=False,
        shape_expected=(1000,),
        shape_got=(1000,),
        dtype_expected="float32",
        dtype_got="float32",
        max_abs_err=3.2,
        max_rel_err=1.0,
        mismatches=8,
        numel=1000,
        worst=(WorstElement(index=(999,), expected=1.5, got=0.0, abs_err=1.5),),
    )
    rec = recommend(Analysis(gpu="x"), _wrong(o))
    assert "8 of 1000" in rec["critical_issue"] and "[999]" in rec["critical_issue"]
    assert "boundary" in rec["minimal_fix_hint"].lower()


def test_precision_and_nan_corrections() -> None:
    small = OutputCheck(
        index=0,
        passed=False,
        shape_expected=(4,),
        shape_got=(4,),
        dtype_expected="float32",
        dtype_got="float32",
        max_abs_err=3e-4,
        max_rel_err=1e-3,
        mismatches=2,
        numel=4,
    )
    assert "precision" in recommend(Analysis(gpu="x"), _wrong(small))["minimal_fix_hint"]
    nan = replace(small, nonfinite_got=3)
    assert "NaN" in recommend(Analysis(gpu="x"), _wrong(nan))["critical_issue"]


def test_integrity_and_cuda_error_corrections() -> None:
    rec = recommend(
        Analysis(gpu="x"),
        _eval(
            outcome="integrity_failure",
            accepted=False,
            findings=(Finding("side_stream", "fail", "work ran on a non-default stream"),),
        ),
    )
    assert "side_stream" in rec["critical_issue"]
    rec = recommend(
        Analysis(gpu="x"),
        _eval(
            outcome="cuda_error",
            accepted=False,
            traceback="RuntimeError: CUDA error: an illegal memory access was encountered",
        ),
    )
    assert "illegal memory access" in rec["critical_issue"] and "index" in rec["minimal_fix_hint"]


# --- text report --------------------------------------------------------------------------------


def test_format_profile(three: ProfileResult, analysis: Analysis) -> None:
    text = format_profile(three, analysis)
    assert "3 kernel launch(es)" in text
    assert "cf_heavy" in text and "(84.9% of GPU time)" in text
    assert "gpu__time_duration.sum" in text and " us" in text
    assert "substituted: sm__inst_executed_pipe_fp32" in text
    assert "Findings (most time at stake first):" in text
    assert "evidence: sm__maximum_warps_per_active_cycle_pct = 37.5 %" in text
    assert "recommendation:" in text
    for line in text.splitlines():
        assert len(line) < 400


def test_format_failed_profile() -> None:
    r = load("ncu_raw_failed_target.csv")
    r = replace(r, ok=False, error_kind="target_failed", message="the profiled program exited with code 3")
    text = format_profile(r, analyze(r, H200))
    assert "PROFILE FAILED [target_failed]" in text and "FillFunctor" in text


def test_analysis_round_trips_through_its_dict(analysis: Analysis) -> None:
    """Run records and events store `to_dict()`; `from_dict` gives back the same typed tree."""
    assert analysis.findings and analysis.kernels
    data = json.loads(json.dumps(analysis.to_dict()))
    back = Analysis.from_dict(data)
    assert back == analysis
    assert back.to_dict() == data
    assert back.findings[0].evidence[0].describe() == analysis.findings[0].evidence[0].describe()


def test_offline_advice_follows_the_device() -> None:
    from cudaforge.engine.agents.offline_judge import NO_PROFILE

    no_profile = Analysis(gpu="cpu", profile_ok=False, profile_message=NO_PROFILE)
    gpu_words = ("SM", "coalesced", "__syncthreads", "warp", "GPU", "blocks per")
    cpu = OfflineJudge().recommend(no_profile, _eval(format="cpu", device="cpu"))
    text = cpu.as_text()
    assert "parallel_for" in text and "vectorize" in text
    assert not any(word in text for word in gpu_words), text
    partly = OutputCheck(index=0, passed=False, shape_expected=(1000,), shape_got=(1000,), dtype_expected="float32",
                         dtype_got="float32", max_abs_err=3.0, max_rel_err=1.0, mismatches=400, numel=1000)
    wrong = OfflineJudge().recommend(no_profile, replace(_wrong(partly), format="cpu", device="cpu")).as_text()
    assert "parallel_for" in wrong and "__syncthreads" not in wrong
    slow = OfflineJudge().recommend(no_profile, _eval(outcome="timeout", accepted=False, device="cpu")).as_text()
    assert "__syncthreads" not in slow and "GPU" not in slow
    # on the GPU the same cases keep their GPU advice
    gpu = OfflineJudge().recommend(Analysis(gpu="H200", profile_ok=False, profile_message="no counters"), _eval())
    assert "coalesced" in gpu.as_text()
    assert "__syncthreads" in OfflineJudge().recommend(no_profile, _wrong(partly)).as_text()
