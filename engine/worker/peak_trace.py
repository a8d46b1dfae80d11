"""What the device holds at an evaluation's peak, for finding where the memory rule is broken.

With CUDAFORGE_MEMORY_HISTORY set to a folder, a CUDA worker records the allocator's history (PyTorch's
memory history: every allocation and free with its Python stack) and at the end writes
`peak_trace.json` there: the largest live allocations at the moment the allocated total was highest,
each with the innermost frames of this project's code and the task's. The phase peaks in the report say
which step peaked; this says which tensors made it. Recording costs time on every allocation, so it is
a diagnostic (bench/gpu_check.sh's `peak-trace` step), never on in a normal evaluation.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

ENV = "CUDAFORGE_MEMORY_HISTORY"
MAX_ENTRIES = 1_000_000
TOP = 12  # allocations listed
FRAMES = 6  # frames kept per allocation
OUR_FILES = ("cudaforge", "/engine/", "task", "candidate")


def requested() -> str | None:
    return os.environ.get(ENV) or None


def start() -> bool:
    """Start recording where asked and possible; whether it started."""
    if requested() is None:
        return False
    import torch

    if not torch.cuda.is_available():
        return False
    try:
        torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES, stacks="python")
    except Exception:
        return False
    return True


def peak_of(trace: list[dict[str, Any]]) -> dict[str, Any]:
    """The replayed allocated total's highest point in one device's trace, and what was live there.
    Frees of allocations the ring buffer lost are ignored, so `peak_bytes` is over the trace's start."""
    live: dict[int, dict[str, Any]] = {}
    total = top = 0
    at_top: list[dict[str, Any]] = []
    for entry in trace:
        action, addr, size = entry.get("action"), entry.get("addr"), int(entry.get("size", 0))
        if action == "alloc":
            live[addr] = entry
            total += size
            if total > top:
                top, at_top = total, list(live.values())
        elif action == "free_requested" and addr in live:
            total -= int(live.pop(addr).get("size", 0))
    largest = sorted(at_top, key=lambda e: -int(e.get("size", 0)))[:TOP]
    return {"peak_bytes": top, "live_at_peak": len(at_top),
            "largest": [{"bytes": int(e.get("size", 0)), "frames": _frames(e)} for e in largest]}


def _frames(entry: dict[str, Any]) -> list[str]:
    frames = [f for f in entry.get("frames", []) if any(s in str(f.get("filename", "")) for s in OUR_FILES)]
    return [f"{Path(str(f.get('filename'))).name}:{f.get('line')} {f.get('name')}" for f in frames[:FRAMES]]


def write() -> None:
    """Write peak_trace.json into the asked folder (best effort: a diagnostic never fails an evaluation)."""
    folder = requested()
    if folder is None:
        return
    import torch

    try:
        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        traces = [peak_of(t) for t in snapshot.get("device_traces", []) if t]
        path = Path(folder) / "peak_trace.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"devices": traces}, indent=1))
    except Exception as exc:
        with open(Path(folder) / "peak_trace.error", "w") as fh:
            fh.write(f"{type(exc).__name__}: {exc}\n")
