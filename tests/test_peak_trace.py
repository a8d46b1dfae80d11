"""engine/worker/peak_trace.py: replaying an allocator history finds the moment the allocated total was
highest and names what was alive then, and an evaluation without the variable records nothing."""

from __future__ import annotations

import pytest
from cudaforge.engine.worker import peak_trace


def _frame(name: str, line: int) -> dict[str, object]:
    return {"filename": "/x/cudaforge/engine/worker/pipeline.py", "line": line, "name": name}


def test_the_peak_is_where_the_live_total_was_highest_and_lists_its_largest_tensors() -> None:
    gib = 1 << 30
    trace = [
        {"action": "alloc", "addr": 1, "size": 6 * gib, "frames": [_frame("draw", 10)]},
        {"action": "alloc", "addr": 2, "size": 2 * gib, "frames": [_frame("reference", 20)]},
        {"action": "free_requested", "addr": 2, "size": 2 * gib},
        {"action": "free_completed", "addr": 2, "size": 2 * gib},
        {"action": "alloc", "addr": 3, "size": 6 * gib, "frames": [_frame("new_draw", 30)]},  # beside the first
        {"action": "free_requested", "addr": 1, "size": 6 * gib},
        {"action": "free_requested", "addr": 99, "size": gib},  # its alloc fell out of the ring buffer
        {"action": "alloc", "addr": 4, "size": 1 * gib, "frames": [{"filename": "/usr/lib/torch/x.py", "line": 1}]},
    ]
    peak = peak_trace.peak_of(trace)
    assert peak["peak_bytes"] == 12 * gib and peak["live_at_peak"] == 2
    assert [e["bytes"] for e in peak["largest"]] == [6 * gib, 6 * gib]
    assert {e["frames"][0] for e in peak["largest"]} == {"pipeline.py:10 draw", "pipeline.py:30 new_draw"}


def test_without_the_variable_nothing_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(peak_trace.ENV, raising=False)
    assert peak_trace.requested() is None and peak_trace.start() is False
