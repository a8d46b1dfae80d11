"""Evaluate a candidate against its task in a sandboxed worker process and return an EvalResult."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cudaforge.engine.candidate import Candidate
from cudaforge.engine.config import GPU_WAIT_S, Config, default, defaults
from cudaforge.engine.evaluation import progress as eval_progress
from cudaforge.engine.evaluation import result_cache, workdirs
from cudaforge.engine.evaluation.sandbox import (
    EXIT_GRACE_S,
    BackgroundReap,
    ProcessOutcome,
    ReportFile,
    SandboxHandle,
    live_sandbox_pids,
    start_sandboxed,
    tail,
    wait_sandboxed,
)
from cudaforge.engine.evaluation.spare import DEFAULT_IDLE_S, Spare, SparePool, start_spare
from cudaforge.engine.evaluation.zygote import enabled as zygote_enabled
from cudaforge.engine.evaluation.zygote import zygote_for
from cudaforge.engine.gpu.lock import foreign_gpu_processes, gpu_lock_path
from cudaforge.engine.integrity.registry import apply_policy, finding
from cudaforge.engine.results import NO_SPEED_CLAIM, EvalResult, Finding, Peaks, TaskCounts, WorkerExit
from cudaforge.engine.task import Task
from cudaforge.engine.worker.job import EvalJob, Mode, WorkerReport

PHASE_GROUPS = {
    "gpu_wait_s": ("gpu_wait", "context_wait", "timing_wait", "memory_wait"),
    "load_s": ("start", "context", "load_task", "build", "init"),
    "correctness_s": ("place", "reference", "correctness", "kernels", "fallback", "cache_probes", "shapes"),
    "timing_s": ("timing", "compile_baseline"),
    "profile_s": ("profile",),
}
AFTER_REPORT = ("done", "exit")  # the worker's phases once its report is written: EXIT_GRACE_S at most
REPORT_POLL_S = 0.005  # how often the app looks for the worker's report


def default_cache_dir() -> Path:
    env = os.environ.get("CUDAFORGE_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cudaforge"


def _timeouts(section: Mapping[str, Any]) -> dict[str, float]:
    """The phase groups' limits from a [timeouts] section, plus the GPU wait (not a key)."""
    return {k: float(section[k]) for k in PHASE_GROUPS if k in section} | {"gpu_wait_s": GPU_WAIT_S}


@dataclass(frozen=True)
class EvalOptions:
    """What an evaluation needs from the configuration; the defaults are the config schema's (engine/config.py)."""

    device: str = default("eval", "device")
    gpu: int = default("eval", "gpu")
    precision: str = default("eval", "precision")
    trials: int = default("eval", "trials")
    seed: int | None = default("eval", "seed")  # None: a random base seed per evaluation (recorded in EvalResult.seeds)
    atol: float | None = default("eval", "atol")
    rtol: float | None = default("eval", "rtol")
    second_distribution: bool = default("eval", "second_distribution")
    timing: Mapping[str, Any] = field(default_factory=lambda: defaults()["timing"])
    timeouts: Mapping[str, float] = field(default_factory=lambda: _timeouts(defaults()["timeouts"]))
    output_limit_bytes: int = default("timeouts", "output_mb") << 20
    open_files: int = default("timeouts", "open_files")
    cache_dir: Path = field(default_factory=default_cache_dir)
    integrity_policy: Mapping[str, str] = field(default_factory=lambda: default("integrity", "policy"))
    speed_of_light_margin: float = default("integrity", "speed_of_light_margin")
    peak_bandwidth_gbs: float | None = None  # DRAM bandwidth alone (kept for callers without a spec)
    peaks: Peaks | None = None  # the GPU spec's figures (speed_of_light.peaks_from_spec); wins over the above
    python: str = sys.executable
    # Reuse results of an identical candidate (engine/evaluation/result_cache.py). Off unless the caller asks:
    # the session/CLI opt in (EvalOptions.from_config(config, result_cache=True)).
    result_cache: bool = False
    spare_idle_s: float = DEFAULT_IDLE_S  # how long a pre-warmed spare may wait for its job
    spares: int = default("eval", "spares")  # warm spares kept (CUDA; one at most on the CPU device)
    zygote: bool = default("eval", "zygote")  # spares forked from a process that imported torch once
    gpu_memory_gb: float | None = default("run", "gpu_memory_gb")  # [run] gpu_memory_gb: the worker's device-memory cap (CUDA only)

    @classmethod
    def from_config(cls, config: Config, **overrides: Any) -> EvalOptions:
        ev, tm, to = config.section("eval"), config.section("timing"), config.section("timeouts")
        cache = config.get("run", "cache_dir")
        opts = cls(
            device=ev["device"], gpu=ev["gpu"], precision=ev["precision"], trials=ev["trials"], seed=ev["seed"],
            atol=ev["atol"], rtol=ev["rtol"], second_distribution=ev["second_distribution"], spares=ev["spares"],
            zygote=ev["zygote"],
            timing=dict(tm),
            timeouts=_timeouts(to),
            output_limit_bytes=int(to["output_mb"]) << 20, open_files=int(to["open_files"]),
            cache_dir=Path(cache).expanduser() if cache else default_cache_dir(),
            integrity_policy=dict(config.get("integrity", "policy")),
            speed_of_light_margin=float(config.get("integrity", "speed_of_light_margin")),
            gpu_memory_gb=config.get("run", "gpu_memory_gb"),
        )
        return replace(opts, **overrides) if overrides else opts

    @property
    def load_s(self) -> float:
        """The limit of loading the task and building the candidate ([timeouts] load_s)."""
        return float(self.timeouts.get("load_s", default("timeouts", "load_s")))

    @property
    def spare_depth(self) -> int:
        """How many warm spares to keep: `spares` on CUDA; on the CPU device one at most (the evaluation's
        timing runs on the host there, and spares importing torch beside it would disturb it)."""
        return max(0, self.spares) if self.device == "cuda" else min(1, max(0, self.spares))

    def phase_limits(self) -> dict[str, float]:
        limits = {phase: float(self.timeouts.get(group, GPU_WAIT_S)) for group, phases in PHASE_GROUPS.items()
                  for phase in phases}
        return limits | dict.fromkeys(AFTER_REPORT, EXIT_GRACE_S)


def progress_file(workdir: Path) -> Path:
    """The worker's progress file in an evaluation's work folder (its build log lies beside it)."""
    return workdir / "sandbox" / "progress.json"


def triton_env(cache: Path, device: str) -> dict[str, str]:
    """Triton's compile and autotuning caches under ours (kept across rounds and processes). On the CPU,
    Triton candidates run in Triton's interpreter; it is read when a kernel is decorated, so it is set
    for every CPU worker (a candidate without Triton never reads it). On a GPU it is never set."""
    env = {"TRITON_CACHE_DIR": str(cache / "triton"), "TRITON_CACHE_AUTOTUNING": "1"}
    env["TRITON_INTERPRET"] = "1" if device == "cpu" else "0"
    return env


# What every real evaluation that ends "ok" records (engine/worker/pipeline.py); a result without it
# was written by someone else: the candidate, through the worker's result file.
_OK_RECORDS = ("correctness", "timing", "kernels", "seeds", "versions")
_OK_PHASES = ("load_task", "build", "correctness", "kernels", "timing")


def forgery_finding(report: WorkerReport | None) -> Finding | None:
    """`result_forgery` when the worker's result claims "ok" but lacks what the worker always records."""
    if report is None or report.outcome != "ok":
        return None
    missing = [k for k in _OK_RECORDS if getattr(report, k) is None]
    corr = report.correctness
    if corr is None or not corr.passed or not corr.trial_results:
        missing.append("passed correctness trials")
    missing += [f"phase {p}" for p in _OK_PHASES if p not in report.phases]
    if not missing:
        return None
    return finding("result_forgery", "the worker's result file says ok but lacks what every evaluation "
                   f"records ({', '.join(missing[:4])}): it was not written by the worker", {"missing": missing})


def with_app_parts(phases: Mapping[str, float], app: Mapping[str, float]) -> dict[str, float]:
    """A worker's `phases` with the app's own seconds beside them: `app.<part>` each, and `app` their sum
    (parts with a second dot lie inside another part and are not summed again). A cache's write is not among
    them: it happens after the result is returned."""
    merged = {**phases, **{k: round(v, 4) for k, v in app.items()}}
    merged["app"] = round(sum(v for k, v in merged.items() if k.startswith("app.") and k.count(".") == 1), 4)
    return merged


def _with_app_phases(result: EvalResult, app: Mapping[str, float]) -> EvalResult:
    return replace(result, phases=with_app_parts(result.phases, app))


ALLOC_CONF = "expandable_segments:True"  # the workers' allocator settings unless the user set their own


class Evaluator:
    """Runs evaluations in fresh sandboxed workers; their timed windows never overlap anything on the GPU
    (the per-GPU reader/writer lock, engine/gpu/rwlock.py).

    `prewarm()` starts spare workers ahead of time (torch imported, CUDA context created), `options.spare_depth`
    of them, so the next `evaluate()` pays no process start; each spare runs one evaluation only. The result is
    taken as soon as the worker has written its report; its exit (the CUDA context's teardown) and the
    sandbox's reap go on in the background (`settle()` waits for them). Results of an identical candidate come
    from the result cache (`options.result_cache`). Call `aclose()` when done.
    """

    def __init__(self, options: EvalOptions, *, keep_workdirs: bool = False) -> None:
        self.options = options
        self.keep_workdirs = keep_workdirs
        self._pool = SparePool()
        self._footprints: dict[str, int] = {}  # a task's sha256 -> the footprint its evaluation counted
        # (a task's sha256, precision) -> what the app counted of it once (use_task_counts), for every job
        self._task_counts: dict[tuple[str, str], TaskCounts] = {}
        self._counts_expected = False  # expect_task_counts: every job will come with its counts
        # Once a caller has asked for a spare, a new one is started as soon as one takes its job (not
        # after the evaluation): its process start and imports overlap the evaluation, and only the
        # GPU part of its warm-up waits for the lock (after the jobs: engine/gpu/turns.py).
        self._keep_warm = False
        # Workers that reported and may still be exiting, with their report's mtime.
        self._reaps: list[tuple[BackgroundReap, float]] = []
        self._stores = result_cache.PendingWrites()  # result-cache writes still going on
        self.last_wall_s: float = 0.0  # seconds of the last evaluate() (cache lookup to result)
        # Seconds from the last reaped worker's report to its process's end (off the round's path now; benches
        # read it after `settle()` to see the teardown's cost); None until one was reaped.
        self.last_exit_s: float | None = None

    # ------------------------------------------------------------------ spare workers

    def _spare_key(self) -> str:
        o = self.options
        env = self.worker_env()
        return json.dumps([o.python, o.device, o.gpu, str(o.cache_dir), sorted(env.items()), o.phase_limits(),
                           o.output_limit_bytes, o.open_files, o.spare_idle_s], default=str)

    def _start_spare(self) -> Spare:
        o = self.options
        return start_spare(
            key=self._spare_key(), prefix=(), python=o.python, device=o.device, gpu=o.gpu, env=self.worker_env(),
            phase_limits=o.phase_limits(), default_limit_s=o.load_s,
            output_limit_bytes=o.output_limit_bytes, open_files=o.open_files,
            warm_limit_s=o.load_s, idle_limit_s=o.spare_idle_s, label="spare", warm_counting=self.spares_count_tasks,
            forked=zygote_enabled(o.zygote))

    async def zygote_ready(self, timeout_s: float = 60.0) -> bool:
        """Start the zygote this evaluator's spares are forked from (where they are: `[eval] zygote`, CUDA or
        the CPU device on Linux) and wait, off the event loop, until it serves forks; whether it does. A caller
        about to start many spares at once (a sweep's slots) waits first: spares started before the zygote is
        ready are exec'd, and sixteen of them importing torch side by side took 4.7-7.0 s each on the H200's
        16 CPUs (the sweep of session 33) where the zygote alone imports once and forks them in milliseconds.
        A round never waits for it (`prewarm` execs its first spare meanwhile)."""
        o = self.options
        if not zygote_enabled(o.zygote):
            return False
        zygote = zygote_for(o.python, o.device, self.worker_env())
        return await asyncio.to_thread(zygote.wait_ready, timeout_s)

    def prewarm(self) -> bool:
        """Keep `options.spare_depth` spare workers warming or waiting (dead ones and ones started for other
        options replaced); cheap to call repeatedly.

        Returns True when a spare is (now) waiting. Call it while the LLM is thinking. From then on,
        every evaluation that takes a spare starts the next one at once.
        """
        depth = self.options.spare_depth
        self._keep_warm = depth > 0
        if depth == 0:
            return False
        self.options.cache_dir.mkdir(parents=True, exist_ok=True)
        self._pool.fill(self._spare_key(), depth, self._start_spare)
        return True

    @property
    def spare(self) -> Spare | None:
        """The spare the next evaluation would take first (the oldest), if any (for status displays and tests)."""
        spares = self._pool.spares
        return spares[0] if spares else None

    @property
    def spares(self) -> tuple[Spare, ...]:
        """Every spare kept now, oldest first."""
        return self._pool.spares

    def _take_spare(self) -> Spare | None:
        return self._pool.take(self._spare_key())

    def _replenish(self) -> None:
        """Start the next spare now that one took a job (only for callers that use spares).

        CUDA only: on the CPU device the evaluation's timing runs on the host, and a spare importing
        torch beside it would disturb it; there the caller's `prewarm()` (while the LLM thinks) stays."""
        if self._keep_warm and self.options.device == "cuda":
            with contextlib.suppress(Exception):  # a spare is an optimisation: never fail an evaluation for it
                self.prewarm()

    async def settle(self, timeout_s: float | None = None) -> None:
        """Wait until the workers that reported are gone (exited, or killed after EXIT_GRACE_S) and their files
        are removed."""
        reaps, self._reaps = self._reaps, []
        for reap, written_at in reaps:
            await asyncio.to_thread(reap.join, timeout_s)
            self._note_reaped(reap, written_at)
        await self._stores.wait()

    def _note_reaped(self, reap: BackgroundReap, report_written_at: float) -> None:
        ended = reap.outcome.ended_at if reap.outcome is not None else 0.0
        if ended and report_written_at:
            self.last_exit_s = round(max(0.0, ended - report_written_at), 4)

    async def aclose(self) -> None:
        """Kill the spare workers (if any) and remove their files; wait for the workers still exiting."""
        self._keep_warm = False
        await self._pool.close()
        await self.settle()

    # ------------------------------------------------------------------ result cache

    def cache_key(self, task: Task, candidate: Candidate) -> str:
        """The result-cache key of evaluating `candidate` on `task` with these options here."""
        o = self.options
        return result_cache.eval_cache_key(candidate.source, task.source, result_cache.eval_settings(o),
                                           result_cache.environment(o.device, o.gpu))

    @property
    def results_dir(self) -> Path:
        return self.options.cache_dir / "results"

    # ------------------------------------------------------------------ evaluation

    def worker_job(self, task: Task, candidate_path: Path, workdir: Path, mode: Mode = "evaluate",
                   candidate: Candidate | None = None) -> EvalJob:
        o = self.options
        return EvalJob(
            mode=mode,
            task_path=str(task.path),
            candidate_path=str(candidate_path),
            format=candidate.format if candidate else "",
            device=o.device,
            gpu=o.gpu,
            precision=o.precision,
            trials=o.trials,
            seed=o.seed if o.seed is not None else secrets.randbelow(1 << 30),
            atol=o.atol,
            rtol=o.rtol,
            second_distribution=o.second_distribution,
            timing=dict(o.timing),
            cache_dir=str(o.cache_dir),
            peaks=o.peaks or (Peaks(dram_bandwidth_gbs=o.peak_bandwidth_gbs) if o.peak_bandwidth_gbs else None),
            speed_of_light_margin=o.speed_of_light_margin,
            gpu_lock_path=str(gpu_lock_path(o.gpu)) if o.device == "cuda" else None,
            gpu_memory_gb=o.gpu_memory_gb,
            result_path=str(workdir / "result.json"),
            progress_path=str(progress_file(workdir)),
            footprint_bytes=self._footprints.get(task.sha256) if mode == "profile" else None,
            task_counts=self._task_counts.get((task.sha256, o.precision)),
        )

    def use_task_counts(self, task: Task, counts: TaskCounts) -> None:
        """Hand `counts` (fit.task_counts: the task's footprint and work, counted once by the app) to every later
        job of `task`, so no worker counts them again, and start later spares without what counting needs:
        the meta-device counts' dispatch modes import torch._dynamo, seconds of a spare's warm-up (a job
        without counts then pays that import itself)."""
        self._task_counts[(task.sha256, counts.precision)] = counts

    def expect_task_counts(self, expected: bool = True) -> None:
        """Every later job's task will have its counts (use_task_counts before its evaluation): spares start
        without what counting needs from now on, the first ones included (a sweep counts its problems in
        one process ahead of them: fit.TaskCounter; a session's fit check counts its task). False: the counts
        did not come after all, and spares started from now on load what counting needs again."""
        self._counts_expected = expected

    @property
    def spares_count_tasks(self) -> bool:
        """Whether spares started now load what counting a task in the worker needs (False once the app's
        counts come with the jobs: use_task_counts, expect_task_counts)."""
        return not (self._task_counts or self._counts_expected)

    def worker_env(self) -> dict[str, str]:
        env = dict(os.environ)
        cache = self.options.cache_dir
        env["CUDAFORGE_NVRTC_CACHE"] = str(cache / "nvrtc")
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor")
        env["TORCH_EXTENSIONS_DIR"] = str(cache / "torch_extensions")
        env.update(triton_env(cache, self.options.device))
        env.setdefault("NCCL_NVLS_ENABLE", "0")
        # Large blocks split by smaller requests left a cached 8 GiB block one allocation short under a cap:
        # level3/31_VisionAttention ran out of memory at 24 GiB with 8 GiB reserved but unallocated (H200,
        # 2026-12-03). Expandable segments grow one mapping instead; a user's own setting is kept.
        env.setdefault("PYTORCH_CUDA_ALLOC_CONF", ALLOC_CONF)
        return env

    def prepare(self, task: Task, candidate: Candidate, mode: str = "evaluate",
                workdir: Path | None = None) -> tuple[Path, Path, Path]:
        """Write the candidate and the worker's spec into `workdir` (a new temp dir by default)."""
        self.options.cache_dir.mkdir(parents=True, exist_ok=True)
        if workdir is None:
            workdir = workdirs.make_workdir(mode)
        cand_path = workdir / "candidate.py"
        cand_path.write_text(candidate.source, encoding="utf-8")
        spec_path = workdir / "worker.json"
        spec_path.write_text(json.dumps(self.worker_job(task, cand_path, workdir, mode, candidate).to_dict()))
        return workdir, cand_path, spec_path

    async def evaluate(self, task: Task, candidate: Candidate, *, use_cache: bool = True,
                       on_progress: eval_progress.ProgressHook | None = None) -> EvalResult:
        """Evaluate `candidate` on `task`: from the result cache, in a spare worker, or in a fresh one.
        `on_progress` hears every phase change and build line while the worker runs."""
        start = time.perf_counter()
        key = None
        if use_cache and self.options.result_cache:
            key = await asyncio.to_thread(self.cache_key, task, candidate)
            hit = result_cache.load_result(self.results_dir, key, candidate.sha256)
            if hit is not None:
                self.last_wall_s = time.perf_counter() - start
                return replace(hit, task_path=str(task.path))
        keyed = time.perf_counter() - start
        result = await self._evaluate_fresh(task, candidate, on_progress)
        if key is not None:
            result = _with_app_phases(result, {"app.cache_key": keyed})
            # Stored off the round's path (an fsync'd write); settle() and the loop's end wait for it.
            self._stores.start(result_cache.store_result, self.results_dir, key, result)
        self.last_wall_s = time.perf_counter() - start
        return result

    async def _evaluate_fresh(self, task: Task, candidate: Candidate,
                              on_progress: eval_progress.ProgressHook | None = None) -> EvalResult:
        began = time.perf_counter()
        self._note_done_reaps()
        spare = self._take_spare()
        workdir, _, spec_path = self.prepare(task, candidate, workdir=spare.workdir if spare else None)
        watcher = asyncio.ensure_future(eval_progress.watch(progress_file(workdir), on_progress)) \
            if on_progress is not None else None
        report = ReportFile(workdir / "result.json")
        handle = None
        try:
            if spare is not None:
                spare.submit(spec_path)
                handle = spare.handle
            else:
                # The worker takes the GPU lock itself once its build is done (builds may overlap).
                handle = start_sandboxed(
                    [self.options.python, "-m", "cudaforge.engine.worker", str(spec_path)],
                    workdir=workdir / "sandbox",
                    env=self.worker_env(),
                    phase_limits=self.options.phase_limits(),
                    default_limit_s=self.options.load_s,
                    output_limit_bytes=self.options.output_limit_bytes,
                    open_files=self.options.open_files,
                )
            submitted = time.perf_counter()
            # Returns once the worker's report is in place: its exit and the sandbox's reap go on in the background.
            waiting = asyncio.ensure_future(wait_sandboxed(handle, REPORT_POLL_S, reported=report))
            self._replenish()
            try:
                warnings = await self._gpu_warnings()
                checked_at = time.time()
                outcome, out_path, err_path = await waiting
            except BaseException:
                waiting.cancel()
                with contextlib.suppress(BaseException):
                    await waiting
                raise
            got, got_at = time.perf_counter(), time.time()
            if spare is not None:  # the supervisor's clock started when the spare did, not at submit
                outcome = replace(outcome, seconds=round(got - submitted, 3))
            report()  # a worker that exited between two looks: its report is read now (None: it wrote none)
            result = self.assemble(task, candidate, workdir, outcome, out_path, err_path, warnings, raw=report.data)
            if result.memory is not None and result.memory.footprint_bytes:
                self._footprints[task.sha256] = int(result.memory.footprint_bytes)
            app = {"app.submit": submitted - began, "app.assemble": time.perf_counter() - got}
            if report.data is not None:  # from the report's mtime to the result in hand (and the exit, if waited for)
                app["app.read"] = max(0.0, got_at - report.written_at)
                if checked_at > report.seen_at:  # the other-processes check ended after the report was there
                    app["app.read.gpu_check"] = min(checked_at, got_at) - report.seen_at
            return _with_app_phases(result, app)
        finally:
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(BaseException):
                    await watcher
            if spare is not None:
                spare.forget()
            self._clean_up_after(handle, workdir, report)

    def _clean_up_after(self, handle: SandboxHandle | None, workdir: Path, report: ReportFile) -> None:
        """Remove the work folder once the worker is gone: now, or (a worker that reported and is still
        exiting) when its background reap is done."""
        def remove() -> None:
            workdirs.finish(workdir, keep=self.keep_workdirs)

        reap = handle.reap if handle is not None else None
        if reap is None:
            remove()
            return
        self._reaps.append((reap, report.written_at))
        reap.then(remove)

    def _note_done_reaps(self) -> None:
        """Forget the background reaps that are over (their exit's seconds kept in `last_exit_s`)."""
        pending = []
        for reap, written_at in self._reaps:
            if reap.done:
                self._note_reaped(reap, written_at)
            else:
                pending.append((reap, written_at))
        self._reaps = pending

    async def _gpu_warnings(self) -> list[Finding]:
        """Other processes on the GPU (not our own sandboxed workers and spares) make timings suspect."""
        if self.options.device != "cuda":
            return []
        others = await asyncio.to_thread(foreign_gpu_processes, self.options.gpu, live_sandbox_pids())
        if not others:
            return []
        named = "; ".join(f"pid {p['pid']} {p['command'] or '?'} ({p['memory_mib']} MiB)" for p in others[:5])
        return [finding("gpu_shared", f"{len(others)} other process(es) use GPU {self.options.gpu}, none of "
                        f"them cudaforge's: {named}; timings may be disturbed",
                        {"pids": [p["pid"] for p in others], "processes": others})]

    def assemble(self, task: Task, candidate: Candidate, workdir: Path, outcome: ProcessOutcome, out_path: Path,
                 err_path: Path, warnings: list[Finding], raw: Mapping[str, Any] | None = None) -> EvalResult:
        """The EvalResult of a worker's run: its report (`raw`, as read when it was taken; else read from the
        work folder), the sandbox's outcome and the app's own checks."""
        result_path = workdir / "result.json"
        stdout_tail, stderr_tail = tail(out_path), tail(err_path)
        if raw is None:
            raw = {}
            if result_path.exists():
                with contextlib.suppress(ValueError, OSError):
                    raw = json.loads(result_path.read_text())
        if not isinstance(raw, Mapping):  # not a report (a candidate wrote the file): none
            raw = {}
        report = WorkerReport.from_dict(dict(raw)) if raw else None
        # "reported": the report was taken before the worker's exit (which goes on in the background).
        exit_reason = {"exited": "ok" if raw else "exit", "reported": "ok", "signal": "crash"}.get(
            outcome.reason, outcome.reason)
        worker_exit = WorkerExit(reason=exit_reason, returncode=outcome.returncode, signal=outcome.signal,
                                 seconds=outcome.seconds, phase=outcome.phase)
        base: dict[str, Any] = {
            "task_path": str(task.path), "candidate_hash": candidate.sha256, "format": candidate.format,
            "device": self.options.device, "stdout_tail": stdout_tail, "stderr_tail": stderr_tail,
        }
        if report is not None:
            result = self._from_report(report, base, candidate, worker_exit)
        else:
            result = self._failure_without_result(base, outcome, worker_exit, stderr_tail)
        # Static checks again here, on the source the app holds: code in the worker could forge its result file.
        from cudaforge.engine.integrity.static import source_findings

        have = {f.name for f in result.findings}
        static = tuple(f for f in source_findings(candidate.source, task.source, precision=self.options.precision)
                       if f.name not in have)
        forged = forgery_finding(report)
        if forged is not None:
            static = (*static, forged)
        findings = apply_policy(tuple(warnings) + result.findings + static, self.options.integrity_policy)
        outcome_name = result.outcome
        message = result.message
        if outcome_name == "ok" and any(f.severity == "fail" for f in findings):
            outcome_name = "integrity_failure"
            message = "integrity: " + "; ".join(f.name for f in findings if f.severity == "fail")
        elif outcome_name == "ok":
            message = f"correct, {result.timing.speedup:.2f}x vs eager" if result.timing and \
                result.timing.speedup is not None else f"correct, {NO_SPEED_CLAIM}" if result.timing else "correct"
        return replace(result, findings=findings, outcome=outcome_name, message=message,
                       accepted=outcome_name == "ok")

    @staticmethod
    def _from_report(report: WorkerReport, base: dict[str, Any], candidate: Candidate,
                     worker_exit: WorkerExit) -> EvalResult:
        """The EvalResult of a worker that wrote its report (before the app's own checks and policy)."""
        comp = report.compile
        if comp is not None and not comp.format:
            comp = replace(comp, format=candidate.format)
        return EvalResult(
            outcome=report.outcome or "runtime_error",  # type: ignore[arg-type]
            accepted=False, gpu_name=report.gpu_name, message=report.message, compile=comp,
            correctness=report.correctness, timing=report.timing, findings=report.findings,
            kernels=report.kernels or (), exit=worker_exit, traceback=report.traceback, phases=dict(report.phases),
            versions=dict(report.versions or {}), numerics=dict(report.numerics), seeds=report.seeds or (),
            memory=report.memory, speed_of_light=report.speed_of_light, **base)

    def _failure_without_result(self, base: dict[str, Any], outcome: ProcessOutcome, worker_exit: WorkerExit,
                                stderr_tail: str) -> EvalResult:
        phase = outcome.phase or "start"
        if outcome.reason == "timeout":
            name, msg = "timeout", f"timed out after {outcome.limit_s:g} s in phase '{phase}'; the worker was killed"
        elif outcome.reason == "output_limit":
            name, msg = "crash", f"killed for writing more than {self.options.output_limit_bytes / 2**20:g} MiB of output"
        elif outcome.reason == "cancelled":
            name, msg = "crash", "cancelled"
        elif outcome.reason == "signal":
            sig = outcome.signal or f"signal {-(outcome.returncode or 0)}"
            if outcome.signal == "SIGKILL":
                name, msg = "crash", f"worker killed by SIGKILL in phase '{phase}' (host out of memory?)"
            else:
                name, msg = "crash", f"worker crashed with {sig} in phase '{phase}'"
        elif outcome.reason == "supervisor_failed":
            name, msg = "crash", "the sandbox supervisor failed; see its log"
        else:
            name, msg = "crash", (f"worker exited with code {outcome.returncode} in phase '{phase}' without a result "
                                  "(the candidate called sys.exit/os._exit?)")
        if "CUDA error" in stderr_tail or "illegal memory access" in stderr_tail:
            name = "cuda_error"
        return EvalResult(outcome=name, accepted=False, message=msg, exit=worker_exit, **base)

