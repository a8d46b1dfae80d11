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
import time
from dataclasses import replace
from pathlib import Path

from cudaforge.engine.candidate import Candidate
from cudaforge.engine.config import GPU_WAIT_S
from cudaforge.engine.evaluation import result_cache, workdirs
from cudaforge.engine.evaluation.evaluator import Evaluator, progress_file, with_app_parts
from cudaforge.engine.evaluation.sandbox import start_sandboxed, wait_sandboxed
from cudaforge.engine.evaluation.spare import PoolTake, Spare, SparePool, start_spare
from cudaforge.engine.profiling import NcuSettings, ProfileResult, interpret_output, prepare_profile
from cudaforge.engine.profiling.runner import PreparedProfile, resolve_ncu
from cudaforge.engine.task import Task


class Profiler:
    """Profiles candidates with ncu. `prewarm()` starts ncu around spare profile workers ahead of time (ncu
    injected, Python started, torch imported, CUDA context created), as many as the evaluator keeps
    (`EvalOptions.spare_depth`), the oldest ready one used by the next `profile()`; successful profiles of an
    identical candidate come from the profile cache.

    ncu prints its report only once the profiled worker has exited, so a profile (unlike an evaluation) waits
    for the exit; the worker in profile mode exits right after its report (engine/worker/entry.py). Where the
    seconds after the worker's report went is in the result's `worker_phases`: `release` (the worker, before
    its exit), `ncu_finish` (its exit and ncu's own report), `app.submit`, `app.reap`, `app.interpret` and
    their sum `app`. The profile cache's write happens after the result is returned."""

    def __init__(self, evaluator: Evaluator, settings: NcuSettings | None = None, *, chip: str = "") -> None:
        self.evaluator = evaluator
        self.settings = settings or NcuSettings()
        self.chip = chip
        self._pool = SparePool()
        self._spare_plans: dict[str, PreparedProfile] = {}  # a spare key -> the ncu command its spares run under
        self._keep_warm = False  # as in Evaluator: the next spare starts when one takes its job
        self._stores = result_cache.PendingWrites()  # profile-cache writes still going on
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
        """Keep ncu-wrapped spare profile workers warming or waiting; False when ncu is missing, the device is
        not CUDA or no spares are kept (nothing to pre-start). The first call ever may query ncu's metric list."""
        o = self.evaluator.options
        ncu = resolve_ncu(self.settings.path)
        if ncu is None or o.device != "cuda" or o.spare_depth == 0:
            return False
        self._keep_warm = True
        key = self._spare_key(ncu)

        def start() -> Spare:
            prepared = self._spare_plans.get(key)
            if prepared is None:
                prepared = self._spare_plans[key] = self._prepare(ncu, list(_PLACEHOLDER))
            prefix = list(prepared.command[:-len(_PLACEHOLDER)])
            return start_spare(
                key=key, prefix=prefix, python=o.python, device=o.device, gpu=o.gpu, env=self.evaluator.worker_env(),
                phase_limits=self._limits(), default_limit_s=float(self.settings.timeout_s),
                output_limit_bytes=o.output_limit_bytes, open_files=o.open_files,
                warm_limit_s=float(self.settings.timeout_s), idle_limit_s=o.spare_idle_s, label="profile-spare",
                warm_counting=getattr(self.evaluator, "spares_count_tasks", True))

        self._pool.fill(key, o.spare_depth, start)
        return True

    @property
    def spare(self) -> Spare | None:
        """The spare the next profile would take first (the oldest), if any."""
        spares = self._pool.spares
        return spares[0] if spares else None

    @property
    def spares(self) -> tuple[Spare, ...]:
        return self._pool.spares

    @property
    def last_take(self) -> PoolTake | None:
        """What the last fresh profile found in the spare pool (why it waited for its spare, if it did)."""
        return self._pool.last_take

    async def aclose(self) -> None:
        """Kill the spare profile workers and wait for the profile-cache writes of this event loop."""
        self._keep_warm = False
        await self._pool.close()
        await self._stores.wait()

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
            # Stored off the round's path (an fsync'd write); aclose() and the loop's end wait for it.
            self._stores.start(result_cache.store_json, root, key, result.to_dict())
        self.last_wall_s = time.perf_counter() - start
        return result

    async def _profile_fresh(self, task: Task, candidate: Candidate, ncu: str) -> ProfileResult:
        began = time.perf_counter()
        key = self._spare_key(ncu)
        spare = self._pool.take(key)
        workdir, _, spec_path = self.evaluator.prepare(task, candidate, mode="profile",
                                                       workdir=spare.workdir if spare else None)
        try:
            start = time.perf_counter()
            prepared = self._spare_plans.get(key) if spare is not None else None
            if spare is not None and prepared is not None:
                spare.submit(spec_path)
                submitted = time.perf_counter()
                if self._keep_warm:
                    with contextlib.suppress(Exception):  # never fail a profile for the next spare
                        self.prewarm()
                outcome, out_path, err_path = await wait_sandboxed(spare.handle)
            else:
                if spare is not None:  # no plan for it (cannot happen: a spare is started with one)
                    spare.kill(remove=False)
                target = [self.evaluator.options.python, "-m", "cudaforge.engine.worker", str(spec_path)]
                prepared = await asyncio.to_thread(self._prepare, ncu, target)
                handle = start_sandboxed(
                    list(prepared.command), workdir=workdir / "sandbox", env=self.evaluator.worker_env(),
                    phase_limits=self._limits(), default_limit_s=float(self.settings.timeout_s),
                    output_limit_bytes=self.evaluator.options.output_limit_bytes)
                submitted = time.perf_counter()
                outcome, out_path, err_path = await wait_sandboxed(handle)
            got, got_at = time.perf_counter(), time.time()
            result = interpret_output(
                _read(out_path), _read(err_path), returncode=outcome.returncode,
                timed_out=outcome.reason == "timeout", plan=prepared.plan, command=prepared.command,
                wall_s=time.perf_counter() - start, chip=prepared.chip, timeout_s=self.settings.timeout_s,
                launch_count=self.settings.launch_count)
            phases = _worker_phases(workdir / "result.json")
            phases.update(_after_report(workdir, outcome.ended_at, got_at))
            app = {"app.submit": submitted - began, "app.interpret": time.perf_counter() - got}
            if outcome.ended_at:
                app["app.reap"] = max(0.0, got_at - outcome.ended_at)
            return _with_app(replace(result, worker_phases=phases), app)
        finally:
            if spare is not None:
                spare.forget()
            workdirs.finish(workdir, keep=self.evaluator.keep_workdirs)


_PLACEHOLDER = ("__target__",)  # where the worker's command goes in a spare's ncu command line


def _with_app(result: ProfileResult, app: dict[str, float]) -> ProfileResult:
    """The app's seconds (`app.<part>`, and `app` their sum) beside the profiled worker's phases."""
    return replace(result, worker_phases=with_app_parts(result.worker_phases, app))


def _after_report(workdir: Path, ended_at: float, got_at: float) -> dict[str, float]:
    """Where the seconds after the worker's report went: `release` (report written -> the worker's exit began,
    its progress file's last phase) and `ncu_finish` (-> ncu ended: the worker's exit and ncu's own report)."""
    out: dict[str, float] = {}
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        written = (workdir / "result.json").stat().st_mtime
        progress = json.loads(progress_file(workdir).read_text())
        exiting = float(progress["since"]) if progress.get("phase") == "exit" else written
        out["release"] = round(max(0.0, exiting - written), 4)
        if ended_at:
            out["ncu_finish"] = round(max(0.0, min(ended_at, got_at) - exiting), 4)
    return out


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
