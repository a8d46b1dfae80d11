"""Prompt texts pinned by golden files (tests/golden/*.txt), and the result/metrics summaries.

Regenerate after an intended wording change with:  UPDATE_GOLDEN=1 .venv/bin/pytest tests/test_agents_prompts.py
then read the diff of tests/golden/ before committing it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from cudaforge.engine.agents import (
    FORMATS,
    JudgeReply,
    Prompt,
    RoundNote,
    build_coder_optimize,
    build_coder_repair,
    build_coder_seed,
    build_judge_correct,
    build_judge_optimize,
    coder_retry_message,
    coder_truncation_note,
    error_log_tail,
    extract_module,
    format_findings,
    format_history,
    format_metrics,
    judge_retry_message,
    metric_names,
    summarize_result,
    tail,
)
from cudaforge.engine.agents.prompts import load_template, render_template
from cudaforge.engine.results import (
    CompileResult,
    Correctness,
    EvalResult,
    Finding,
    KernelLaunch,
    OutputCheck,
    Timing,
    TimingStats,
    WorkerExit,
    WorstElement,
)

GOLDEN = Path(__file__).parent / "golden"

TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """y = relu(x @ W^T + b) * scale"""

    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) * self.scale


batch_size = 128
in_features = 512
out_features = 256
scale = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
'''

CANDIDATE = '''import torch
import torch.nn as nn
from cudaforge.engine.nvrtc import load_kernel

SOURCE = r"""
extern "C" __global__ void cf_linear_relu(const float* x, const float* w, const float* b, float* y,
                                          long long m, long long n, long long k, float scale) {
  long long row = blockIdx.y, col = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= n) return;
  float acc = b[col];
  for (long long i = 0; i < k; ++i) acc += x[row * k + i] * w[col * k + i];
  y[row * n + col] = (acc > 0.f ? acc : 0.f) * scale;
}
"""
_linear_relu = load_kernel(SOURCE, "cf_linear_relu")


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        x = x.contiguous()
        m, k = x.shape
        n = self.linear.out_features
        y = torch.empty(m, n, device=x.device, dtype=x.dtype)
        _linear_relu(grid=((n + 255) // 256, m), block=(256,),
                     args=(x, self.linear.weight, self.linear.bias, y, m, n, k, self.scale))
        return y
'''

GPU = "NVIDIA H200 (sm_90): 132 SMs, 141 GB HBM3e at 4.8 TB/s, 50 MB L2, 67 TFLOP/s FP32"


def _stats(median: float) -> TimingStats:
    return TimingStats(
        median_ms=median,
        iqr_ms=median * 0.02,
        min_ms=median * 0.97,
        max_ms=median * 1.1,
        mean_ms=median,
        trials=100,
        method="cuda_event",
    )


def compile_error_result() -> EvalResult:
    log = (
        'cf_linear_relu.cu(2): error: expected a ";"\n'
        + "\n".join(f"note: line {i}" for i in range(80))
        + (
            '\ncf_linear_relu.cu(3): error: identifier "blockIdx" is undefined in this context\n1 error detected in the compilation.'
        )
    )
    return EvalResult(
        outcome="compile_error",
        accepted=False,
        task_path="tasks/linear_relu.py",
        candidate_hash="abc123",
        format="nvrtc",
        device="cuda:0",
        message="NVRTC compilation failed",
        compile=CompileResult(ok=False, format="nvrtc", seconds=0.04, log=log),
        exit=WorkerExit(reason="exit", returncode=1, seconds=4.2, phase="compile"),
    )


def wrong_result() -> EvalResult:
    check = OutputCheck(
        index=0,
        passed=False,
        shape_expected=(128, 256),
        shape_got=(128, 256),
        dtype_expected="torch.float32",
        dtype_got="torch.float32",
        max_abs_err=0.8125,
        max_rel_err=1.0,
        mismatches=16384,
        numel=32768,
        worst=(WorstElement(index=(0, 128), expected=0.8125, got=0.0, abs_err=0.8125),),
        reason="half of the columns are zero",
    )
    return EvalResult(
        outcome="wrong_result",
        accepted=False,
        task_path="tasks/linear_relu.py",
        candidate_hash="abc124",
        format="nvrtc",
        device="cuda:0",
        message="output 0 differs from the reference in 16384 of 32768 elements",
        compile=CompileResult(ok=True, format="nvrtc", seconds=0.05),
        correctness=Correctness(
            passed=False, trials=5, trials_passed=0, atol=1e-4, rtol=1e-4, outputs=(check,)
        ),
        exit=WorkerExit(reason="ok", seconds=6.0),
    )


def ok_result() -> EvalResult:
    check = OutputCheck(
        index=0,
        passed=True,
        shape_expected=(128, 256),
        shape_got=(128, 256),
        dtype_expected="torch.float32",
        dtype_got="torch.float32",
        max_abs_err=2.4e-6,
        max_rel_err=1.1e-5,
        numel=32768,
    )
    return EvalResult(
        outcome="ok",
        accepted=True,
        task_path="tasks/linear_relu.py",
        candidate_hash="abc125",
        format="nvrtc",
        device="cuda:0",
        gpu_name="NVIDIA H200",
        message="correct, 1.31x faster than eager",
        compile=CompileResult(ok=True, format="nvrtc", seconds=0.05, cached=True),
        correctness=Correctness(
            passed=True, trials=5, trials_passed=5, atol=1e-4, rtol=1e-4, outputs=(check,)
        ),
        timing=Timing(
            reference=_stats(0.0512),
            candidate=_stats(0.0391),
            speedup=1.31,
            speedup_low=1.27,
            speedup_high=1.35,
        ),
        kernels=(KernelLaunch(name="cf_linear_relu", count=1, device_time_us=36.5, share=1.0, custom=True),),
        findings=(
            Finding(
                name="excessive_speedup", severity="info", message="speedup is within the physical floor"
            ),
        ),
        exit=WorkerExit(reason="ok", seconds=9.5),
    )


METRICS = {
    "cf_linear_relu": {
        "gpu__time_duration.sum": (36.5, "us"),
        "dram__throughput.avg.pct_of_peak_sustained_elapsed": (11.2, "%"),
        "sm__throughput.avg.pct_of_peak_sustained_elapsed": (23.4, "%"),
        "l1tex__t_sector_hit_rate.pct": (48.0, "%"),
        "launch__registers_per_thread": (40, "register/thread"),
        "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct": (61.7, "%"),
    }
}
FINDINGS = [
    "memory-bound by latency, not bandwidth: DRAM at 11% of peak while long-scoreboard stalls are 62%",
    {
        "name": "uncoalesced_weight_reads",
        "severity": "warn",
        "message": "w is read with a stride of k floats per thread",
    },
]
HISTORY = [
    RoundNote(1, "seed", "compile_error", detail="identifier blockIdx is undefined"),
    RoundNote(2, "repair", "ok", 1.12, "correct, 1.12x faster than eager"),
    RoundNote(
        3, "tile the K loop in shared memory", "wrong_result", None, "output 0 differs in 16384 elements"
    ),
    RoundNote(4, "repair", "ok", 1.31, "correct, 1.31x faster than eager", best=True),
]


def check_golden(name: str, text: str) -> None:
    """Compare with tests/golden/<name>.txt; UPDATE_GOLDEN=1 rewrites the file instead."""
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"{path} missing: run UPDATE_GOLDEN=1 pytest {__file__}"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, f"prompt {name} changed: diff it against {path}, or UPDATE_GOLDEN=1 if intended"


@pytest.mark.parametrize("fmt", FORMATS)
def test_golden_coder_seed(fmt: str) -> None:
    check_golden(f"coder_seed_{fmt}", build_coder_seed(TASK, gpu_summary=GPU, format=fmt).render())


def test_golden_coder_repair() -> None:
    judge = JudgeReply(
        mode="correct",
        critical_issue="the column index uses blockIdx.x * blockDim.x but the grid only covers n/2 columns",
        why_it_matters="the second half of each row is never written, so it stays zero",
        minimal_fix_hint="launch (n + 255) // 256 blocks along x",
    )
    prompt = build_coder_repair(
        TASK,
        candidate_source=CANDIDATE,
        result=wrong_result(),
        recommendation=judge,
        history=HISTORY[:3],
        gpu_summary=GPU,
    )
    check_golden("coder_repair", prompt.render())


def test_golden_coder_optimize_with_edited_free_text_recommendation() -> None:
    prompt = build_coder_optimize(
        TASK,
        candidate_source=CANDIDATE,
        result=ok_result(),
        recommendation="Tile x and w through shared memory, 32x32 tiles. (edited by the person)",
        history=HISTORY,
        gpu_summary=GPU,
    )
    check_golden("coder_optimize", prompt.render())


def test_golden_judge_correct() -> None:
    prompt = build_judge_correct(TASK, candidate_source=CANDIDATE, result=compile_error_result())
    check_golden("judge_correct", prompt.render())


def test_golden_judge_optimize() -> None:
    prompt = build_judge_optimize(
        TASK,
        candidate_source=CANDIDATE,
        result=ok_result(),
        metrics=METRICS,
        findings=FINDINGS,
        gpu_summary=GPU,
    )
    check_golden("judge_optimize", prompt.render())


def test_golden_retry_messages() -> None:
    text = "\n---\n".join(
        [
            coder_retry_message("the reply contains no code."),
            coder_truncation_note(32000),
            judge_retry_message("missing key(s) 'plan'", "optimize"),
            judge_retry_message("the JSON does not parse: Expecting value at line 1 column 2", "correct"),
        ]
    )
    check_golden("retry_messages", text + "\n")


def test_format_examples_are_valid_modules() -> None:
    """Each format's example in the prompt must itself pass our own extraction."""
    for fmt in FORMATS:
        assert extract_module(load_template(f"format_{fmt}")) is not None, fmt


def test_prompts_are_pure_and_contain_their_inputs() -> None:
    a = build_judge_optimize(
        TASK, candidate_source=CANDIDATE, result=ok_result(), metrics=METRICS, gpu_summary=GPU
    )
    b = build_judge_optimize(
        TASK, candidate_source=CANDIDATE, result=ok_result(), metrics=METRICS, gpu_summary=GPU
    )
    assert a == b
    assert "dram__throughput.avg.pct_of_peak_sustained_elapsed = 11.2 %" in a.user
    assert CANDIDATE.strip() in a.user and TASK.strip() in a.user and GPU in a.user
    assert '"evidence"' in a.user and "JSON" in a.system


def test_inserted_text_is_not_rescanned_for_placeholders() -> None:
    tricky = "int a[2] = {{1, 2}}; // {{gpu_summary}}"
    prompt = build_coder_seed(tricky, gpu_summary="GPU")
    assert tricky in prompt.user


def test_render_template_rejects_missing_and_unused_values() -> None:
    with pytest.raises(KeyError, match="missing"):
        render_template("coder_retry")
    with pytest.raises(KeyError, match="unused"):
        render_template("coder_retry", reason="x", extra="y")


def test_unknown_format_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown candidate format 'cuda_tile'"):
        build_coder_seed(TASK, format="cuda_tile")


def test_summaries() -> None:
    assert summarize_result(None).startswith("No measurement yet")
    s = summarize_result(wrong_result())
    assert "correctness: FAILED, 0/5 trials passed" in s
    assert "mismatches 16384/32768 (50%)" in s and "at [0, 128]: expected 0.8125 got 0" in s
    s = summarize_result(ok_result())
    assert "speedup vs eager: 1.31x (spread 1.27x to 1.35x)" in s
    assert "cf_linear_relu (custom) x1 100%" in s
    log = error_log_tail(compile_error_result())
    assert log.startswith(
        'compiler log:\nfirst error reported: cf_linear_relu.cu(2): error: expected a ";"\n[...'
    )
    assert log.rstrip().endswith("1 error detected in the compilation.")
    assert error_log_tail(None).startswith("(no error log")
    assert tail("a\nb\nc", lines=2) == "[... earlier lines cut ...]\nb\nc"
    assert tail("short") == "short"


def test_metrics_in_every_accepted_shape() -> None:
    class Row:
        def __init__(self) -> None:
            self.kernel = "k1"
            self.metrics = {"sm__throughput.avg.pct_of_peak_sustained_elapsed": {"value": 50.0, "unit": "%"}}

    assert format_metrics([Row()]) == "kernel k1:\n  sm__throughput.avg.pct_of_peak_sustained_elapsed = 50 %"
    assert format_metrics([{"name": "k2", "metrics": {"x": 3}}]) == "kernel k2:\n  x = 3"

    @dataclass(frozen=True)
    class MetricValue:  # the shape of engine/profiling's rows: .name, .metrics{name: .value/.unit}
        value: float | None
        unit: str

    @dataclass(frozen=True)
    class KernelProfile:
        name: str
        metrics: dict

    rows = [
        KernelProfile(
            "cf_k", {"gpu__time_duration.sum": MetricValue(3.5, "us"), "x.pct": MetricValue(None, "%")}
        )
    ]
    assert format_metrics(rows) == "kernel cf_k:\n  gpu__time_duration.sum = 3.5 us\n  x.pct = n/a"
    assert format_metrics(None).startswith("(no hardware metrics")
    assert format_metrics("preformatted table") == "preformatted table"
    assert metric_names(METRICS) >= {"gpu__time_duration.sum"}
    assert metric_names([Row()]) == {"sm__throughput.avg.pct_of_peak_sustained_elapsed"}
    assert format_findings(None) == "(no analyzer findings)"
    assert format_findings([Finding(name="n", severity="warn", message="m")]) == "- [warn] n: m"


def test_history_keeps_the_best_round_when_cut() -> None:
    notes = [RoundNote(1, "seed", "ok", 1.5, best=True)] + [
        RoundNote(i, "x", "wrong_result") for i in range(2, 15)
    ]
    text = format_history(notes, limit=5)
    lines = text.splitlines()
    assert lines[0] == "(9 older rounds not shown)"
    assert "round 1 [seed]: ok, 1.5x  <- best so far" in lines[1]
    assert lines[-1].startswith("- round 14")
    assert format_history([]) == "(no earlier rounds)"
    assert RoundNote.from_result(3, "seed", ok_result()).speedup == 1.31


def test_prompt_render_shape() -> None:
    assert Prompt("S", "U").render() == "=== system ===\nS\n=== user ===\nU\n"
