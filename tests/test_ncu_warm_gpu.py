"""A profile spare under ncu launches one kernel in the profiled range while it warms up (entry._warm_ncu), so
ncu's profiling session is set up before the job; the job's report holds the candidate's kernels only. Run
on a GPU machine with ncu (skipped elsewhere)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from cudaforge.engine.candidate import load_candidate
from cudaforge.engine.evaluation.evaluator import Evaluator
from cudaforge.engine.observe import NCU_WARM_KERNEL
from cudaforge.engine.task import load_task

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_a_warm_profile_spare_profiles_only_the_candidates_kernels(gpu_options) -> None:
    from cudaforge.engine.evaluation.profiler import Profiler
    from cudaforge.engine.profiling import NcuSettings

    async def run() -> object:
        ev = Evaluator(gpu_options)
        prof = Profiler(ev, NcuSettings())
        try:
            if not prof.prewarm():
                pytest.skip("no ncu: no profile spare")
            deadline = time.monotonic() + 120
            while prof.spare is not None and prof.spare.ready() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            task = load_task(EXAMPLES / "gelu" / "task.py")
            return await prof.profile(task, load_candidate(EXAMPLES / "gelu" / "nvrtc.py"), use_cache=False)
        finally:
            await prof.aclose()
            await ev.aclose()

    result = asyncio.run(run())
    if result.error_kind in ("ncu_missing", "permission_denied"):
        pytest.skip(result.message)
    assert result.ok, result.message
    names = [k.name for k in result.kernels]
    assert names and all(n != NCU_WARM_KERNEL for n in names), names
    assert any("cf_gelu" in n for n in names), names
    assert result.worker_phases.get("spare_ncu_warm", 0.0) > 0, result.worker_phases  # the spare warmed ncu up
