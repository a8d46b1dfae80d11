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
    """Memory of CUDA device `gpu` free for an evaluation, from nvidia-smi: free now plus what our own workers
    hold (None when nvidia-smi is missing or fails)."""
    from cudaforge.engine.gpu.lock import cudaforge_gpu_bytes
    from cudaforge.engine.gpu.specs import query_nvidia_smi

    props = query_nvidia_smi(gpu)
    free = props.get("free_memory") if props else None
    if free is None:
        return None
    # Our own workers (another session of a batch, say) free theirs before they give the GPU lock up.
    return int(free) + cudaforge_gpu_bytes(gpu)


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
