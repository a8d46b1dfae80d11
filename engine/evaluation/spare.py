"""Pre-warmed spare workers: a sandboxed worker started before it is needed, used for one job only.

The spare runs `python -m cudaforge.engine.worker --spare WORKDIR DEVICE GPU` under the same
supervisor as every worker (scrubbed environment, rlimits, subreaper sweep). It imports torch and the
evaluation code, creates the CUDA context (with no hold: no kernel, no allocation of ours,
engine/gpu/context.py), runs its first kernels as a reader of the per-GPU lock (so they never fall inside
another worker's timed window) and, outside ncu, starts CUPTI for the kernel check, writes `ready.json` and waits (phase "idle", with its own
limit) for `job.json`. Submitting a job is writing that file; from then on the normal phase limits
apply. A spare is never given a second job: the caller drops it after one use, whatever happened.
Every live spare is also killed at interpreter exit, and the supervisor exits (killing its tree) when
the app's process is gone, so no spare outlives the app.

When the next spare starts (Evaluator/Profiler): on CUDA, as soon as the current spare takes its job,
so its process start and imports overlap this round's evaluation and profile; its GPU part
(the first kernels) waits for a read hold of the per-GPU lock, where announced jobs go first (engine/gpu/turns.py), so
it warms right after this round's profile instead of between the evaluation and its profile.

How many: a `SparePool` keeps `[eval] spares` of them warm (CUDA; one at most on the CPU device) and hands
out the oldest ready one. On the H200 a spare needs ~10 s to warm (torch import 4-5 s, CUPTI start 4-6 s)
while a round whose LLM replies at once lasts ~5-6 s: with one spare every such round waited for it, with
two each spare has two rounds to get ready. Each warm spare holds a CUDA context (~0.5-0.8 GiB of device
memory): the memory admission counts it as one of our processes (engine/worker/pipeline.py `_budget`).

Forked spares (`[eval] zygote`, on by default): the hand-over above kept the import off the round's path
only while a round lasted longer than the import. Rounds whose replies come at once now come 1.1-2.2 s
apart, and a spare's import took 3.4-4.6 s under their load (H200), so every third round waited. An
evaluation's spare is now forked from a zygote that imported everything once (engine/evaluation/zygote.py:
its supervisor and worker are forked, the sandbox kept); only the GPU part is left of its warm-up. ncu's
spares are still started by ncu, which must start the process it profiles.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudaforge.engine.config import GPU_WAIT_S
from cudaforge.engine.evaluation.sandbox import (
    SandboxHandle,
    kill_sandboxed,
    read_outcome,
    start_sandboxed,
    tail,
)
from cudaforge.engine.evaluation.workdirs import make_workdir
from cudaforge.engine.fsutil import atomic_write_json
from cudaforge.engine.gpu.lock import gpu_lock_path

DEFAULT_IDLE_S = GPU_WAIT_S  # a spare waits for its job as long as a job may wait for the GPU
_LIVE: dict[int, Spare] = {}


@dataclass
class Spare:
    """One started spare worker; `key` says what it was started for (argv, env, limits)."""

    handle: SandboxHandle
    workdir: Path
    key: str
    started: float = field(default_factory=time.monotonic)
    used: bool = False

    @property
    def sandbox_dir(self) -> Path:
        return self.workdir / "sandbox"

    def alive(self) -> bool:
        return self.handle.alive()

    def ready(self) -> dict[str, Any] | None:
        """What the spare wrote once warm (its pid, warm-up seconds); None while still warming."""
        with contextlib.suppress(OSError, ValueError):
            return json.loads((self.workdir / "ready.json").read_text())
        return None

    def submit(self, spec_path: Path) -> None:
        """Hand the spare its one job (atomic write: it never reads half a file)."""
        if self.used:
            raise RuntimeError("a spare worker runs one job only")
        self.used = True
        atomic_write_json(self.workdir / "job.json", {"spec": str(spec_path)})

    def kill(self, remove: bool = True) -> None:
        _LIVE.pop(id(self), None)
        kill_sandboxed(self.handle)
        if remove:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def forget(self) -> None:
        _LIVE.pop(id(self), None)

    def death(self) -> str:
        """Why a dead spare died, in one line: its supervisor's outcome (reason, exit code or signal, the phase it
        was in, after how long) and the last line its worker wrote to stderr. For a spare found dead: a spare
        that no job ever reached leaves nothing else behind once its files are removed."""
        outcome = read_outcome(self.handle)
        how = outcome.signal or (f"code {outcome.returncode}" if outcome.returncode is not None else "no code")
        lines = [ln.strip() for ln in tail(Path(self.handle.spec.stderr_path)).splitlines() if ln.strip()]
        words = f"; last stderr line: {lines[-1][:200]}" if lines else "; no stderr"
        return (f"{outcome.reason} ({how}) in phase '{outcome.phase or '?'}' after {outcome.seconds:.1f} s"
                f"{words}")


def start_spare(*, key: str, prefix: Sequence[str], python: str, device: str, gpu: int, env: Mapping[str, str],
                phase_limits: Mapping[str, float], default_limit_s: float, output_limit_bytes: int,
                open_files: int, warm_limit_s: float, idle_limit_s: float = DEFAULT_IDLE_S,
                label: str = "spare", warm_counting: bool = True, forked: bool = False) -> Spare:
    """Start a spare now and return at once (it warms up in the background). `warm_counting`: its warm-up
    also loads what counting a task in the worker needs (torch._dynamo), for jobs that bring no TaskCounts.
    `forked`: fork it from the zygote for these options (engine/evaluation/zygote.py) once that has imported
    everything, else (and under a prefix such as ncu, which must start the process) start Python for it."""
    workdir = make_workdir(label)
    argv = [*prefix, python, "-m", "cudaforge.engine.worker", "--spare", str(workdir), device, str(gpu)]
    if device == "cuda":
        # The warm-up's first kernels are a reader of the per-GPU lock: a kernel launched while another
        # worker times its own disturbs those timings (its context creation needs no hold:
        # engine/gpu/context.py).
        argv += ["--lock", str(gpu_lock_path(gpu))]
        if not prefix:
            argv.append("--cupti")  # start CUPTI for the kernel check; never under ncu (one subscriber)
        else:
            argv.append("--ncu-warm")  # under ncu: its profiling session set up by a warm-up kernel
    if not warm_counting:
        argv.append("--no-counting")
    limits = {**dict(phase_limits), "warm": float(warm_limit_s), "idle": float(idle_limit_s)}
    started = time.monotonic()
    fork = None
    if forked and not prefix:
        from cudaforge.engine.evaluation.zygote import zygote_for

        fork = zygote_for(python, device, env).fork
    handle = start_sandboxed(argv, workdir=workdir / "sandbox", env=env, phase_limits=limits,
                             default_limit_s=default_limit_s, output_limit_bytes=output_limit_bytes,
                             open_files=open_files, fork=fork)
    spare = Spare(handle=handle, workdir=workdir, key=key, started=started)
    _LIVE[id(spare)] = spare
    return spare


@dataclass(frozen=True)
class PoolTake:
    """What one `SparePool.take` found: why a job waited for its spare, if it did. A job that finds its
    spare still warming although the pool started spares long before shows here whether they had died or
    been started for other options (a changed key kills them). The drops and starts are counted since the
    previous take, at every fill as well: a fill between two takes (a session's prewarm while the LLM
    thinks) replaces what died without a word otherwise."""

    live: int  # live spares for the key, the taken one included
    dropped_dead: int  # spares found dead since the previous take (killed by a limit, crashed)
    dropped_other_key: int  # spares started for other options since the previous take: killed
    taken_age_s: float | None  # seconds since the taken spare was started (None: none taken)
    taken_ready: bool  # it had said it was ready
    waiting_ages_s: tuple[float, ...] = ()  # the spares left in the pool: seconds since each was started
    started: int = 0  # spares the pool started since the previous take (its refill included)
    deaths: tuple[str, ...] = ()  # why each spare found dead since the previous take died (Spare.death)


class SparePool:
    """Up to `depth` warm spares for one key (what they were started for), oldest first. `take` hands out the
    oldest ready one (else the oldest still warming: the furthest along); spares that died or were started
    for other options are killed whenever they are met."""

    def __init__(self) -> None:
        self._spares: list[Spare] = []
        self.last_take: PoolTake | None = None
        # Since the last take: spares dropped dead, dropped for another key, started.
        self._dead_since = self._other_since = self._started_since = 0
        self._deaths: list[str] = []

    @property
    def spares(self) -> tuple[Spare, ...]:
        return tuple(self._spares)

    def _prune(self, key: str) -> None:
        """Kill the spares that died or were started for other options, counted for the next take."""
        keep = []
        for spare in self._spares:
            alive = spare.alive()  # asked once: a spare that dies meanwhile is counted as one or the other
            if alive and spare.key == key:
                keep.append(spare)
            else:
                self._dead_since += not alive
                self._other_since += alive
                if not alive:
                    with contextlib.suppress(Exception):  # evidence only: never fail a fill or a take
                        self._deaths.append(spare.death())
                spare.kill()
        self._spares = keep

    def fill(self, key: str, depth: int, start: Callable[[], Spare]) -> int:
        """Start spares (`start()`) until `depth` live ones for `key` wait; returns how many were started."""
        self._prune(key)
        started = 0
        while len(self._spares) < depth:
            self._spares.append(start())
            started += 1
        self._started_since += started
        return started

    def take(self, key: str) -> Spare | None:
        """The spare for the next job (removed from the pool), or None when no live one for `key` is left."""
        self._prune(key)
        dead, other, started = self._dead_since, self._other_since, self._started_since
        deaths, self._deaths = tuple(self._deaths), []
        self._dead_since = self._other_since = self._started_since = 0
        live = len(self._spares)
        if not self._spares:
            self.last_take = PoolTake(live=0, dropped_dead=dead, dropped_other_key=other, taken_age_s=None,
                                      taken_ready=False, started=started, deaths=deaths)
            return None
        ready = next((s for s in self._spares if s.ready() is not None), None)
        pick = ready or self._spares[0]
        self._spares.remove(pick)
        now = time.monotonic()
        self.last_take = PoolTake(live=live, dropped_dead=dead, dropped_other_key=other,
                                  taken_age_s=round(now - pick.started, 3), taken_ready=ready is not None,
                                  waiting_ages_s=tuple(round(now - s.started, 3) for s in self._spares),
                                  started=started, deaths=deaths)
        return pick

    def clear(self) -> list[Spare]:
        """Every spare, removed from the pool (for the caller to kill)."""
        spares, self._spares = self._spares, []
        return spares

    async def close(self) -> None:
        """Kill every spare and remove its files (the kills off the event loop: each waits for its tree)."""
        spares = self.clear()
        if spares:
            await asyncio.to_thread(lambda: [s.kill() for s in spares])


def live_spares() -> list[Spare]:
    return list(_LIVE.values())


@atexit.register
def _kill_all_at_exit() -> None:
    for spare in list(_LIVE.values()):
        with contextlib.suppress(Exception):
            spare.kill()
