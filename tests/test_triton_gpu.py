"""Triton candidates on a GPU: every Triton example accepted, its kernels counted as its own, a kernel
that does not compile reported with the candidate's line, and the kernels profiled by ncu. Run on a
GPU machine (skipped elsewhere)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from cudaforge.engine.candidate import Candidate, load_candidate
from cudaforge.engine.evaluation.evaluator import Evaluator
from cudaforge.engine.task import load_task

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TRITON_EXAMPLES = sorted(p.parent.name for p in EXAMPLES.glob("*/triton_kernel.py"))


def test_there_are_four_triton_examples() -> None:
    assert len(TRITON_EXAMPLES) >= 4


@pytest.mark.parametrize("task", TRITON_EXAMPLES)
def test_triton_example_is_accepted(task: str, gpu_options) -> None:
    cand = load_candidate(EXAMPLES / task / "triton_kernel.py")
    r = asyncio.run(Evaluator(gpu_options).evaluate(load_task(EXAMPLES / task / "task.py"), cand))
    assert r.outcome == "ok", f"{task}: {r.message}\n{[(f.name, f.message, f.evidence) for f in r.findings]}\n" \
        f"{r.traceback}\n{r.stderr_tail}"
    assert r.format == "triton" and r.timing is not None and r.timing.candidate.method == "cuda_event"
    assert r.speedup is not None and r.speedup > 0
    # the profiler's kernel names are the jit functions' names: the candidate's own, most of the time
    own = [k for k in r.kernels if k.custom]
    assert own and sum(k.share for k in own) > 0.9, r.kernels
    assert r.compile is not None and r.compile.triton["interpreter"] is False
    if task == "gelu":
        assert r.compile.triton["autotune"]["cf_gelu_tanh"]["best"] is not None


def test_triton_compile_error_on_the_gpu_names_the_line(gpu_options) -> None:
    source = (EXAMPLES / "relu" / "triton_kernel.py").read_text()
    broken = source.replace("tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)",
                            "tl.store(y_ptr + offs, tl.maximum(x, undefined_thing), mask=mask)")
    assert broken != source
    line = next(i for i, text in enumerate(broken.splitlines(), 1) if "undefined_thing" in text)
    r = asyncio.run(Evaluator(gpu_options).evaluate(load_task(EXAMPLES / "relu" / "task.py"),
                                                    Candidate.from_source(broken)))
    assert r.outcome == "compile_error", r.message
    assert f"line {line}" in r.message and r.compile is not None
    assert f"candidate.py:{line}: error:" in r.compile.log


def test_triton_kernels_are_profiled(gpu_options) -> None:
    from cudaforge.engine.evaluation.profiler import Profiler
    from cudaforge.engine.profiling import NcuSettings

    ev = Evaluator(gpu_options)
    prof = Profiler(ev, NcuSettings())
    task = load_task(EXAMPLES / "softmax" / "task.py")
    result = asyncio.run(prof.profile(task, load_candidate(EXAMPLES / "softmax" / "triton_kernel.py")))
    if result.error_kind in ("ncu_missing", "permission_denied"):
        pytest.skip(result.message)
    assert result.ok, result.message
    assert any("cf_softmax_rows" in k.name for k in result.kernels), [k.name for k in result.kernels]
