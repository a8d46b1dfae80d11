"""End-to-end evaluations on the CPU device: real worker processes and real C++ builds."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import pytest
from cudaforge.engine.candidate import Candidate, load_candidate
from cudaforge.engine.compiler_log import diagnostics, error_count
from cudaforge.engine.evaluation.evaluator import Evaluator
from cudaforge.engine.results import EvalResult
from cudaforge.engine.task import load_task

HERE = Path(__file__).parent / "core_tasks"
TASK = HERE / "task.py"


def evaluate(options, candidate: str | Candidate) -> EvalResult:
    cand = candidate if isinstance(candidate, Candidate) else load_candidate(HERE / candidate)
    return asyncio.run(Evaluator(options).evaluate(load_task(TASK), cand))


@pytest.fixture(scope="module")
def correct_result(cpu_options) -> EvalResult:
    return evaluate(cpu_options, "correct.py")


def test_correct_candidate_is_accepted_with_full_report(correct_result: EvalResult) -> None:
    r = correct_result
    assert r.outcome == "ok", r.message + r.traceback + r.stderr_tail
    assert r.accepted
    assert r.format == "cpu"
    assert r.compile is not None and r.compile.ok
    assert r.correctness is not None and r.correctness.passed
    # 2 task trials plus the shifted distribution, alternating order
    assert r.correctness.trials == 3
    assert {t.order for t in r.correctness.trial_results} == {"reference_first", "candidate_first"}
    assert {t.distribution for t in r.correctness.trial_results} == {"task", "shifted"}
    out = r.correctness.outputs[0]
    assert out.shape_got == (64, 128) and out.dtype_got == "float32" and out.mismatches == 0
    assert r.timing is not None and r.timing.speedup > 0
    assert r.timing.reference.trials == 5 and r.timing.candidate.method == "perf_counter"
    assert any(k.custom and k.count >= 1 for k in r.kernels)
    assert not r.failing_findings()
    assert r.numerics["reference"]["matmul_allow_tf32"] is False
    assert "correctness" in r.phases and "timing" in r.phases


def test_result_round_trips_through_json(correct_result: EvalResult) -> None:
    again = EvalResult.from_dict(correct_result.to_dict())
    assert again == correct_result


def test_second_evaluation_hits_the_build_cache(cpu_options, correct_result: EvalResult) -> None:
    second = evaluate(cpu_options, "correct.py")
    assert second.accepted
    assert second.compile is not None and second.compile.cached
    assert second.compile.seconds < 15


def test_wrong_result_reports_mismatches(cpu_options, correct_result) -> None:
    r = evaluate(cpu_options, "wrong.py")
    assert r.outcome == "wrong_result" and not r.accepted
    out = r.correctness.outputs[0]
    assert not out.passed and out.mismatches == out.numel == 64 * 128
    assert abs(out.max_abs_err - 0.01) < 1e-3
    assert out.worst and abs(out.worst[0].got - out.worst[0].expected - 0.01) < 1e-3
    assert r.timing is None


def test_python_exception_is_a_runtime_error_with_traceback(cpu_options, correct_result) -> None:
    r = evaluate(cpu_options, "exception.py")
    assert r.outcome == "runtime_error"
    assert "tile size does not divide" in r.message
    assert "ValueError" in r.traceback


def test_hang_is_killed_within_its_phase_limit(cpu_options) -> None:
    opts = replace(cpu_options, timeouts={**cpu_options.timeouts, "correctness_s": 4.0})
    start = time.monotonic()
    r = evaluate(opts, "hang.py")
    assert r.outcome == "timeout"
    assert r.exit is not None and r.exit.phase == "correctness"
    assert time.monotonic() - start < 60


def test_native_crash_is_reported_as_crash(cpu_options) -> None:
    r = evaluate(cpu_options, "crash.py")
    assert r.outcome == "crash"
    assert r.exit is not None and r.exit.signal == "SIGSEGV"
    assert "SIGSEGV" in r.message


def test_compile_error_shows_the_compiler_log(cpu_options) -> None:
    r = evaluate(cpu_options, "compile_error.py")
    assert r.outcome == "compile_error"
    assert r.compile is not None and not r.compile.ok
    assert "error" in r.compile.log.lower()
    assert "compile error" in r.message
    # the headline is the compiler's first diagnostic, placed on the candidate's own line (1-based),
    # never torch's "Error building extension ... [1/2] c++ ..." wrapper or the ninja command line
    source = (HERE / "compile_error.py").read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if "return x * 2" in text)
    assert r.message.startswith(f"compile error: line {line}: error: expected"), r.message
    assert "main.cpp:" in r.message and "Error building extension" not in r.message and "c++ -" not in r.message
    # a failed build's time is the build's, not 0.00 s
    assert r.compile.seconds > 0.1 and r.compile.seconds <= r.phases["build"] + 0.01
    assert error_count(r.compile.log) == 1
    assert [d.severity for d in diagnostics(r.compile.log)] == ["error"]


def test_environment_is_scrubbed(
    cpu_options, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, correct_result
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-must-not-leak")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-must-not-leak")
    monkeypatch.setenv("HF_TOKEN", "hf-must-not-leak")
    spy = tmp_path / "spy.txt"
    source = (HERE / "reads_env.py").read_text().replace("__SPY_PATH__", str(spy))
    r = evaluate(cpu_options, Candidate.from_source(source))
    assert r.accepted, r.message
    seen = spy.read_text()
    assert "must-not-leak" not in seen
    cwd = [line for line in seen.splitlines() if line.startswith("cwd=")][0]
    assert "cudaforge-evaluate-" in cwd  # its own temp folder, not ours


def test_bad_task_is_reported_as_task_error(cpu_options, tmp_path: Path) -> None:
    bad = tmp_path / "task.py"
    bad.write_text(
        TASK.read_text().replace("return [torch.randn(ROWS, COLS)]", "raise RuntimeError('no data')")
    )
    r = asyncio.run(Evaluator(cpu_options).evaluate(load_task(bad), load_candidate(HERE / "hang.py")))
    assert r.outcome == "task_error"
    assert "get_inputs() raised RuntimeError: no data" in r.message


def test_compile_baseline_on_request(cpu_options, correct_result) -> None:
    opts = replace(cpu_options, timing={**cpu_options.timing, "baselines": ["eager", "compile"]})
    r = evaluate(opts, "correct.py")
    assert r.accepted, r.message
    t = r.timing
    assert t is not None and t.compile_baseline is not None and t.compile_baseline.trials == 5
    assert t.speedup_vs_compile == pytest.approx(t.compile_baseline.median_ms / t.candidate.median_ms)
    assert "compile_baseline_error" not in t.settings
    # the eager baseline is timed with PyTorch's defaults, the reference checked in IEEE fp32
    assert r.numerics["eager_baseline"]["cudnn_allow_tf32"] is True
    assert r.numerics["reference"]["cudnn_allow_tf32"] is False
