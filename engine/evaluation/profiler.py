"""Profile a candidate with Nsight Compute: ncu wraps a worker in profile mode, inside the sandbox.

Only kernels launched inside the worker's `candidate` NVTX range are profiled (not input generation
or the reference). A missing ncu, forbidden counters or a failed target give a ProfileResult that
says what went wrong and how to fix it; they never raise.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path

from cudaforge.engine.candidate import Candidate
from cudaforge.engine.config import GPU_WAIT_S
from cudaforge.engine.evaluation import result_cache
from cudaforge.engine.evaluation.evaluator import Evaluator
from cudaforge.engine.evaluation.sandbox import run_sandboxed, wait_sandboxed
from cudaforge.engine.evaluation.spare import Spare, start_spare
from cudaforge.engine.profiling import NcuSettings, ProfileResult, interpret_output, prepare_profile
from cudaforge.engine.profiling.runner import PreparedProfile, resolve_ncu
from cudaforge.engine.task import Task


class Profiler:
    """Profiles candidates with ncu. `prewarm()` starts ncu around a spare worker ahead of time (ncu
    injected, Python started, torch imported, CUDA context created), used by the next `profile()`;
    successful profiles of an identical candidate come from the profile cache."""

    def __init__(self, evaluator: Evaluator, settings: NcuSettings | None = None, *, chip: str = "") -> None:
        self.evaluator = evaluator
        self.settings = settings or NcuSettings()
        self.chip = chip
        self._spare: Spare | None = None
        self._spare_plan: PreparedProfile | None = None
        self._keep_warm = False  # as in Evaluator: the next spare starts when one takes its job
        self.last_wall_s: float = 0.0

    def _limits(self) -> dict[str, float]:
        limits = {p: float(self.settings.timeout_s) for p in ("start", "load_task", "build", "init", "gpu_wait",
                                                              "profile")}
        limits["build"] = self.evaluator.options.load_s
        limits.update(gpu_wait=GPU_WAIT_S, memory_wait=GPU_WAIT_S)
        return limits

    def _prepare(self, ncu: str, target: list[str]) -> PreparedProfile:
        return prepare_profile(target, settings=self.settings, ncu_path=ncu, chip=self.chip,
                               cache_dir=self.evaluator.options.cache_dir / "ncu")

    def _spare_key(self, ncu: str) -> str:
        return json.dumps([self.evaluator._spare_key(), ncu, self.settings.to_table(), self.chip], default=str)

    def prewarm(self) -> bool:
        """Start ncu with a spare profile worker unless one is waiting; False when ncu is missing or the
        device is not CUDA (nothing to pre-start). The first call ever may query ncu's metric list."""
        o = self.evaluator.options
        ncu = resolve_ncu(self.settings.path)
        if ncu is None or o.device != "cuda":
            return False
        self._keep_warm = True
        key = self._spare_key(ncu)
        if self._spare is not None and self._spare.alive() and self._spare.key == key:
            return True
        if self._spare is not None:
            self._spare.kill()
            self._spare = None
        placeholder = ["__target__"]
        prepared = self._prepare(ncu, placeholder)
        prefix = list(prepared.command[:-len(placeholder)])
        self._spare = start_spare(
            key=key, prefix=prefix, python=o.python, device=o.device, gpu=o.gpu, env=self.evaluator.worker_env(),
            phase_limits=self._limits(), default_limit_s=float(self.settings.timeout_s),
            output_limit_bytes=o.output_limit_bytes, open_files=o.open_files,
            warm_limit_s=float(self.settings.timeout_s), idle_limit_s=o.spare_idle_s, label="profile-spare")
        self._spare_plan = prepared
        return True

    @property
    def spare(self) -> Spare | None:
        return self._spare

    async def aclose(self) -> None:
        self._keep_warm = False
        spare, self._spare = self._spare, None
        if spare is not None:
            await asyncio.to_thread(spare.kill)

    def cache_key(self, task: Task, candidate: Candidate, ncu: str) -> str:
        identity = ""
        with contextlib.suppress(OSError):
            st = os.stat(os.path.realpath(ncu))
            identity = f"{os.path.realpath(ncu)}:{st.st_size}:{int(st.st_mtime)}"
        return result_cache.profile_cache_key(self.evaluator.cache_key(task, candidate),
                                              {"settings": self.settings.to_table(), "chip": self.chip,
                                               "ncu": identity})

    async def profile(self, task: Task, candidate: Candidate, *, use_cache: bool = True) -> ProfileResult:
        start = time.perf_counter()
        ncu = resolve_ncu(self.settings.path)
        if ncu is None:
            return ProfileResult(ok=False, error_kind="ncu_missing",
                                 message=f"ncu not found ('{self.settings.path}'): install Nsight Compute or set "
                                         "[ncu] path in cudaforge.toml")
        root = self.evaluator.options.cache_dir / "profiles"
        key = None
        if use_cache and self.evaluator.options.result_cache:
            key = await asyncio.to_thread(self.cache_key, task, candidate, ncu)
            hit = result_cache.load_json(root, key)
            if hit is not None:
                with contextlib.suppress(Exception):
                    cached = replace(ProfileResult.from_dict(hit), cached=True)
                    self.last_wall_s = time.perf_counter() - start
                    return cached
        result = await self._profile_fresh(task, candidate, ncu)
        if key is not None and result.ok:
            await asyncio.to_thread(result_cache.store_json, root, key, result.to_dict())
        self.last_wall_s = time.perf_counter() - start
        return result

    async def _profile_fresh(self, task: Task, candidate: Candidate, ncu: str) -> ProfileResult:
        spare, self._spare = self._spare, None
        if spare is not None and (not spare.alive() or spare.key != self._spare_key(ncu)):
            spare.kill()
            spare = None
        workdir, _, spec_path = self.evaluator.prepare(task, candidate, mode="profile",
                                                       workdir=spare.workdir if spare else None)
        try:
            start = time.perf_counter()
            if spare is not None and self._spare_plan is not None:
                prepared = self._spare_plan
                spare.submit(spec_path)
                if self._keep_warm:
                    with contextlib.suppress(Exception):  # never fail a profile for the next spare
                        self.prewarm()
                outcome, out_path, err_path = await wait_sandboxed(spare.handle)
            else:
                target = [self.evaluator.options.python, "-m", "cudaforge.engine.worker", str(spec_path)]
                prepared = await asyncio.to_thread(self._prepare, ncu, target)
                outcome, out_path, err_path = await run_sandboxed(
                    list(prepared.command), workdir=workdir / "sandbox", env=self.evaluator.worker_env(),
                    phase_limits=self._limits(), default_limit_s=float(self.settings.timeout_s),
                    output_limit_bytes=self.evaluator.options.output_limit_bytes)
            result = interpret_output(
                _read(out_path), _read(err_path), returncode=outcome.returncode,
                timed_out=outcome.reason == "timeout", plan=prepared.plan, command=prepared.command,
                wall_s=time.perf_counter() - start, chip=prepared.chip, timeout_s=self.settings.timeout_s,
                launch_count=self.settings.launch_count)
            return replace(result, worker_phases=_worker_phases(workdir / "result.json"))
        finally:
            if spare is not None:
                spare.forget()
            if not self.evaluator.keep_workdirs:
                shutil.rmtree(workdir, ignore_errors=True)


def _worker_phases(result_path: Path) -> dict[str, float]:
    """Where the profiled worker's own seconds went (load, build, GPU wait, the profiled range); the rest
    of the profile's wall time is ncu's."""
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
        phases = json.loads(result_path.read_text()).get("phases") or {}
        return {str(k): round(float(v), 4) for k, v in phases.items()}
    return {}


def _read(path: Path, limit: int = 32 << 20) -> str:
    try:
        with path.open("rb") as fh:
            return fh.read(limit).decode("utf-8", errors="replace")
    except OSError:
        return ""
