"""Does a task fit the card? Said once per task, before any candidate is built or written.

The footprint (inputs + outputs + parameters) is counted on the meta device in a subprocess (the app
never imports task code or creates a CUDA context); the card's free memory comes from nvidia-smi. A
task cannot fit when 1.25 x its footprint + 1 GiB exceeds the free memory, or under the `[run]
gpu_memory_gb` cap when even its footprint + the slices and the context do (memory.fits), or when the
host lacks the memory for the reference's outputs and input snapshots (engine/worker/memory.py holds
the rules; the worker applies them again before every build).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudaforge.engine.results import SpeedOfLight, TaskCounts, from_dict
from cudaforge.engine.worker.memory import (
    cap_bytes,
    estimate_bytes,
    fit_message,
    fits,
    host_available_bytes,
    host_message,
    host_needed_bytes,
    task_name,
)


@dataclass(frozen=True)
class FitCheck:
    fits: bool
    footprint_bytes: int
    needed_bytes: int
    free_bytes: int | None
    cap_bytes: int | None
    message: str = ""  # the one line said when it does not fit
    counts: TaskCounts | None = None  # what the footprint check counted, for the workers (Evaluator.use_task_counts)


def card_free_bytes(gpu: int) -> int | None:
    """Memory of CUDA device `gpu` free for an evaluation, without a CUDA context in this process: free now
    (NVML, else nvidia-smi) plus what our own workers hold, read as of one moment (lock.card_share); None
    when neither can tell."""
    from cudaforge.engine.gpu import nvml
    from cudaforge.engine.gpu.lock import card_share
    from cudaforge.engine.gpu.specs import query_nvidia_smi

    def free() -> int | None:
        now = nvml.free_bytes(gpu)
        if now is not None:
            return now
        props = query_nvidia_smi(gpu)
        return props.get("free_memory") if props else None

    # Our own workers (another session of a batch, say) free theirs before they give the GPU lock up.
    share = card_share(gpu, free)
    return share.free_with_ours if share is not None else None


async def task_footprint(task_path: str | Path, *, python: str, seed: int = 42, precision: str = "fp32",
                         env: dict[str, str] | None = None) -> dict[str, Any]:
    """The task's meta footprint from a subprocess (see footprint_main)."""
    proc = await asyncio.create_subprocess_exec(
        python, "-m", "cudaforge.engine.worker.memory", str(task_path), str(seed), precision,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env)
    out, _ = await proc.communicate()
    with contextlib.suppress(ValueError, IndexError):
        return dict(json.loads(out.decode().strip().splitlines()[-1]))
    return {"error": "the footprint check printed nothing", "kind": "unknown"}


async def check_task_fit(task_path: str | Path, options: Any, *, shown_path: str | Path | None = None) -> FitCheck | None:
    """None when there is nothing to say (CPU device, unknown footprint or card); else the verdict. `task_path`
    is imported; the message names `shown_path` (a resumed run imports its copy, named by the original)."""
    if getattr(options, "device", "cpu") != "cuda":
        return None
    seed = options.seed if options.seed is not None else 42  # the footprint does not depend on the draw
    fp = await task_footprint(task_path, python=options.python, seed=seed, precision=options.precision)
    if "footprint_bytes" not in fp:
        return None
    counts = task_counts(fp, options.precision)
    free = await asyncio.to_thread(card_free_bytes, options.gpu)
    cap = cap_bytes(getattr(options, "gpu_memory_gb", None))
    if free is None and cap is None:
        return None
    footprint = int(fp["footprint_bytes"])
    limit_free = free if free is not None else cap
    ok = fits(footprint, int(limit_free), cap)  # type: ignore[arg-type]
    message = "" if ok else fit_message(task_name(str(shown_path or task_path)), footprint, int(limit_free), cap)  # type: ignore[arg-type]
    host_need = host_needed_bytes(int(fp.get("input_bytes", 0)), int(fp.get("output_bytes", 0)))
    host_free = host_available_bytes()
    if ok and host_free is not None and host_need > host_free:
        ok, message = False, host_message(task_name(str(shown_path or task_path)), host_need, host_free)
    return FitCheck(fits=ok, footprint_bytes=footprint, needed_bytes=estimate_bytes(footprint, cap), free_bytes=free,
                    cap_bytes=cap, message=message, counts=counts)


def task_counts(fp: dict[str, Any], precision: str) -> TaskCounts | None:
    """The counts a footprint check printed (footprint_main), as the workers take them; None without a
    complete footprint."""
    if "footprint_bytes" not in fp or "error" in fp:
        return None
    work = fp.get("work")
    footprint = {k: v for k, v in fp.items() if k != "work"}
    return TaskCounts(precision=precision, footprint=footprint,
                      work=from_dict(SpeedOfLight, work) if isinstance(work, dict) else None)


class TaskCounter:
    """Counts many tasks (footprint and work, task_counts) in one subprocess, ahead of their evaluations:
    `ahead(paths)` starts counting them in order in the background, `counts_of(path)` waits for one. One
    interpreter's imports for all of them: a worker that counts its own task first imports torch._dynamo
    (the meta-device dispatch modes), about 3.5 s of CPU per spare on the H200 and twice that under a
    sweep's load, and spares that need not count start without it (Evaluator.expect_task_counts)."""

    def __init__(self, *, python: str, seed: int = 42, precision: str = "fp32",
                 env: dict[str, str] | None = None, task_limit_s: float = 60.0) -> None:
        self.python, self.seed, self.precision, self.env = python, seed, precision, env
        self.task_limit_s = task_limit_s  # one task's counting (the imports included for the first)
        self._proc: asyncio.subprocess.Process | None = None
        self._results: dict[str, dict[str, Any]] = {}
        self._done: dict[str, asyncio.Event] = {}
        self._runner: asyncio.Task[None] | None = None
        self._closing = False

    def ahead(self, paths: list[str | Path]) -> None:
        """Start counting `paths`, in this order, in the background."""
        order = [str(p) for p in paths]
        for p in order:
            self._done.setdefault(p, asyncio.Event())
        self._runner = asyncio.ensure_future(self._count_all(order))

    async def _count_all(self, order: list[str]) -> None:
        try:
            self._proc = await asyncio.create_subprocess_exec(
                self.python, "-m", "cudaforge.engine.worker.memory", "--stream", str(self.seed), self.precision,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
                env=self.env)
            assert self._proc.stdin is not None and self._proc.stdout is not None
            for path in order:
                if self._closing:
                    break
                self._proc.stdin.write(path.encode() + b"\n")
                await self._proc.stdin.drain()
                try:  # a task that hangs at import or on the meta device stops the counting, not the caller
                    line = await asyncio.wait_for(self._proc.stdout.readline(), self.task_limit_s)
                except TimeoutError:
                    self._results[path] = {"error": f"counting took over {self.task_limit_s:g} s", "kind": "unknown"}
                    with contextlib.suppress(ProcessLookupError):
                        self._proc.kill()
                    break
                if not line:
                    break
                try:
                    self._results[path] = dict(json.loads(line.decode()))
                except ValueError:
                    self._results[path] = {"error": "the counting process printed no JSON", "kind": "unknown"}
                self._done[path].set()
        except (OSError, ConnectionError, RuntimeError) as exc:
            for path in order:
                self._results.setdefault(path, {"error": f"could not count: {exc}", "kind": "unknown"})
        finally:
            for path in order:  # whatever was not counted: the workers count it themselves
                self._results.setdefault(path, {"error": "the counting process ended early", "kind": "unknown"})
                self._done[path].set()
            await self._stop()

    async def counts_of(self, path: str | Path) -> TaskCounts | None:
        """The counts of `path` (one of `ahead`'s) once counted; None where it could not be counted."""
        key = str(path)
        event = self._done.get(key)
        if event is None:
            return None
        await event.wait()
        return task_counts(self._results[key], self.precision)

    def counted(self, path: str | Path) -> TaskCounts | None:
        """The counts of `path` where they are ready now, never waiting (None: not counted yet, or not
        countable): what a scheduler can plan with before it commits to a task."""
        key = str(path)
        event = self._done.get(key)
        if event is None or not event.is_set() or key not in self._results:
            return None
        return task_counts(self._results[key], self.precision)

    async def _stop(self) -> None:
        """End the subprocess: its stdin closed, it exits after the task it counts (killed after 10 s)."""
        proc = self._proc
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        self._proc = None

    async def aclose(self) -> None:
        """Stop counting (what is left uncounted gets no counts) and end the subprocess."""
        self._closing = True
        if self._runner is not None:
            with contextlib.suppress(Exception):
                await self._runner  # it ends after the task being counted, and stops the subprocess
        await self._stop()
