"""Profile a candidate with Nsight Compute: ncu wraps a worker in profile mode, inside the sandbox.

Only kernels launched inside the worker's `candidate` NVTX range are profiled (not input generation
or the reference). A missing ncu, forbidden counters or a failed target give a ProfileResult that
says what went wrong and how to fix it; they never raise.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

from .candidate import Candidate
from .evaluator import Evaluator
from .profiling import NcuSettings, ProfileResult, interpret_output, prepare_profile
from .profiling.runner import resolve_ncu
from .sandbox import run_sandboxed
from .task import Task


class Profiler:
    def __init__(self, evaluator: Evaluator, settings: NcuSettings | None = None, *, chip: str = "") -> None:
        self.evaluator = evaluator
        self.settings = settings or NcuSettings()
        self.chip = chip

    async def profile(self, task: Task, candidate: Candidate) -> ProfileResult:
        ncu = resolve_ncu(self.settings.path)
        if ncu is None:
            return ProfileResult(ok=False, error_kind="ncu_missing",
                                 message=f"ncu not found ('{self.settings.path}'): install Nsight Compute or set "
                                         "[ncu] path in cudaforge.toml")
        workdir, _, spec_path = self.evaluator.prepare(task, candidate, mode="profile")
        try:
            target = [self.evaluator.options.python, "-m", "cudaforge.engine.worker", str(spec_path)]
            prepared = await asyncio.to_thread(
                prepare_profile, target, settings=self.settings, ncu_path=ncu, chip=self.chip,
                cache_dir=self.evaluator.options.cache_dir / "ncu")
            start = time.perf_counter()
            limits = {p: float(self.settings.timeout_s) for p in
                      ("start", "load_task", "build", "init", "gpu_wait", "profile")}
            limits["build"] = float(self.evaluator.options.timeouts.get("load_s", 900.0))
            limits["gpu_wait"] = 3600.0
            outcome, out_path, err_path = await run_sandboxed(
                list(prepared.command), workdir=workdir / "sandbox", env=self.evaluator.worker_env(),
                phase_limits=limits, default_limit_s=float(self.settings.timeout_s),
                output_limit_bytes=self.evaluator.options.output_limit_bytes)
            return interpret_output(
                _read(out_path), _read(err_path), returncode=outcome.returncode,
                timed_out=outcome.reason == "timeout", plan=prepared.plan, command=prepared.command,
                wall_s=time.perf_counter() - start, chip=prepared.chip, timeout_s=self.settings.timeout_s,
                launch_count=self.settings.launch_count)
        finally:
            if not self.evaluator.keep_workdirs:
                shutil.rmtree(workdir, ignore_errors=True)


def _read(path: Path, limit: int = 32 << 20) -> str:
    try:
        with path.open("rb") as fh:
            return fh.read(limit).decode("utf-8", errors="replace")
    except OSError:
        return ""
