"""Where a worker's wall time goes inside a step, by sampling its main thread's Python stack.

With CUDAFORGE_STACK_SAMPLES set to a folder, a worker samples its main thread every few milliseconds from a
thread of its own and at the end writes `stacks-<pid>.json` there: for each (step, GPU hold) the samples'
innermost frames, most frequent first. The phases say how long a step took; this says what the process
was doing meanwhile (a timed window that held the GPU for seconds with the GPU idle, say). Sampling costs
a little CPU all along, so it is a diagnostic (bench/gpu_check.sh's sweeps can set it), never on in a
normal evaluation.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

ENV = "CUDAFORGE_STACK_SAMPLES"
INTERVAL_S = 0.005
FRAMES = 24  # innermost frames kept per sample (an import chain is deep)
TOP = 8  # stacks kept per (step, hold)

_STATE: dict[str, Any] = {"thread": None, "stop": None, "counts": None}


def requested() -> str | None:
    return os.environ.get(ENV) or None


def _stack(frame: Any) -> str:
    """The innermost frames, an import's machinery folded into one `import:<module>` entry (the outermost
    module being imported), so the line that imported shows."""
    parts: list[str] = []
    importing = ""
    while frame is not None and len(parts) < FRAMES:
        code = frame.f_code
        if code.co_filename.startswith("<frozen importlib"):
            if code.co_name == "_find_and_load":
                importing = str(frame.f_locals.get("name", "?"))
        else:
            if importing:
                parts.append(f"import:{importing}")
                importing = ""
            parts.append(f"{code.co_name}@{Path(code.co_filename).name}:{frame.f_lineno}")
        frame = frame.f_back
    return " <- ".join(parts)


def start() -> bool:
    """Start sampling where asked; whether it started."""
    if requested() is None or _STATE["thread"] is not None:
        return False
    from cudaforge.engine.worker.gpu_share import hold_kind
    from cudaforge.engine.worker.harness import current_step

    main_id = threading.main_thread().ident
    counts: collections.Counter[tuple[str, str, str]] = collections.Counter()  # -> seconds
    stop = threading.Event()

    def run() -> None:
        # Each sample stands for the time since the previous one: a main thread busy in Python keeps the
        # GIL for its switch interval, so samples come further apart than INTERVAL_S then.
        last = time.perf_counter()
        while not stop.wait(INTERVAL_S):
            frame = sys._current_frames().get(main_id)
            now = time.perf_counter()
            if frame is not None:
                counts[(current_step() or "-", hold_kind(), _stack(frame))] += now - last
            last = now

    thread = threading.Thread(target=run, name="cudaforge-stack-samples", daemon=True)
    _STATE.update(thread=thread, stop=stop, counts=counts)
    thread.start()
    return True


def summary(seconds: collections.Counter[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """Per (step, hold): its sampled seconds and its most frequent stacks, longest first."""
    groups: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for (step, hold, stack), t in seconds.items():
        groups[(step, hold)][stack] += t
    out = [{"step": step, "hold": hold, "seconds": round(sum(c.values()), 3),
            "stacks": [{"seconds": round(t, 3), "stack": s} for s, t in c.most_common(TOP)]}
           for (step, hold), c in groups.items()]
    return sorted(out, key=lambda g: -g["seconds"])


def write() -> None:
    """Stop sampling and write the summary (where start() started it)."""
    folder, thread = requested(), _STATE["thread"]
    if folder is None or thread is None:
        return
    _STATE["stop"].set()
    thread.join(timeout=1.0)
    from cudaforge.engine.worker.harness import write_result

    path = Path(folder) / f"stacks-{os.getpid()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_result(path, {"pid": os.getpid(), "at": time.time(), "interval_s": INTERVAL_S,
                        "groups": summary(_STATE["counts"])})
