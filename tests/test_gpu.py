"""CUDA tests: the NVRTC helper and real evaluations of the examples. Run on a GPU machine."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest
from cudaforge.engine.candidate import load_candidate
from cudaforge.engine.evaluation.evaluator import Evaluator
from cudaforge.engine.task import load_task

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TASKS = sorted(p.parent.name for p in EXAMPLES.glob("*/task.py"))


def test_nvrtc_packs_scalars_by_declared_type_and_uses_current_stream() -> None:
    import torch
    from cudaforge.engine.nvrtc import load_kernel

    src = r"""
    extern "C" __global__ void k(const float* x, float* y, float a, long long n, double b, int c) {
      long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
      for (int r = 0; r < 2000; ++r) { if (i < n) y[i] = a * x[i] + (float)b + c; }
    }"""
    kern = load_kernel(src, "k")
    assert kern.param_types == ["pointer", "pointer", "float", "long long", "double", "int"]
    n = 1 << 22
    x = torch.randn(n, device="cuda")
    y = torch.zeros_like(x)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        kern(grid=((n + 255) // 256,), block=(256,), args=(x, y, 0.5, n, 0.25, 3))
        got = y.clone()  # same stream: must see the kernel's result
    side.synchronize()
    torch.testing.assert_close(got, 0.5 * x + 3.25)


def test_nvrtc_large_dynamic_shared_memory() -> None:
    import torch
    from cudaforge.engine.nvrtc import load_kernel

    src = r"""
    extern "C" __global__ void fill(float* y, int n) {
      extern __shared__ float buf[];
      for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = (float)i;
      __syncthreads();
      for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = buf[n - 1 - i];
    }"""
    kern = load_kernel(src, "fill")
    n = 100 * 1024 // 4
    y = torch.empty(n, device="cuda")
    kern(grid=(1,), block=(256,), args=(y, n), shared_mem=n * 4)
    torch.cuda.synchronize()
    assert float(y[0]) == n - 1 and float(y[-1]) == 0


def test_nvrtc_compile_error_carries_the_log() -> None:
    from cudaforge.engine.nvrtc import NvrtcError, load_kernel

    with pytest.raises(NvrtcError, match="error"):
        load_kernel('extern "C" __global__ void bad(float* y) { y[0] = undefined_name; }', "bad")


@pytest.mark.parametrize("task", TASKS)
def test_nvrtc_example_is_accepted(task: str, gpu_options) -> None:
    r = asyncio.run(Evaluator(gpu_options).evaluate(load_task(EXAMPLES / task / "task.py"),
                                                    load_candidate(EXAMPLES / task / "nvrtc.py")))
    assert r.outcome == "ok", f"{task}: {r.message}\n{r.traceback}\n{r.stderr_tail}"
    assert r.timing is not None and r.timing.candidate.method == "cuda_event" and r.timing.l2_flush
    assert any(k.custom for k in r.kernels)


@pytest.mark.parametrize(
    ("candidate", "outcomes"),
    [
        ("cuda_compile_error.py", {"compile_error"}),
        ("cuda_wrong_result.py", {"wrong_result"}),
        ("cuda_illegal_address.py", {"cuda_error", "crash"}),
        ("cuda_hang.py", {"timeout"}),
    ],
)
def test_broken_cuda_candidates(candidate: str, outcomes: set[str], gpu_options) -> None:
    opts = replace(gpu_options, timeouts={**gpu_options.timeouts, "correctness_s": 20.0})
    task = next(p for p in (EXAMPLES / "relu" / "task.py", EXAMPLES / "gelu" / "task.py") if p.exists())
    r = asyncio.run(Evaluator(opts).evaluate(load_task(task), load_candidate(EXAMPLES / "broken" / candidate)))
    assert r.outcome in outcomes, f"{candidate}: {r.outcome} {r.message}"
    if r.outcome == "compile_error":
        assert r.compile is not None and "error" in r.compile.log


def test_the_result_comes_at_the_workers_report_and_its_exit_follows(gpu_options) -> None:
    """On CUDA the worker's exit (its context's teardown) is not round time: the app has the result within a
    few ms of the report (`app.read`), and the exit, reaped in the background, is measured apart."""
    task = EXAMPLES / "relu" / "task.py"

    async def go() -> tuple:
        ev = Evaluator(replace(gpu_options, spares=2))
        try:
            assert ev.prewarm() and len(ev.spares) == 2
            while any(s.ready() is None and s.alive() for s in ev.spares):
                await asyncio.sleep(0.05)
            r = await ev.evaluate(load_task(task), load_candidate(EXAMPLES / "relu" / "nvrtc.py"))
            await ev.settle()
            return r, ev.last_exit_s, len(ev.spares)
        finally:
            await ev.aclose()

    r, exit_s, kept = asyncio.run(go())
    assert r.outcome == "ok", f"{r.message}\n{r.stderr_tail}"
    print(f"app {r.phases['app']:.3f} s (read {r.phases['app.read']:.3f} s), worker exit after its report "
          f"{exit_s} s (background)")
    assert r.exit is not None and r.exit.reason == "ok" and r.phases["app.read"] < 0.1
    assert exit_s is not None and kept == 2
