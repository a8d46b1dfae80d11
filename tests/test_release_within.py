"""Between an evaluation's steps the allocator's cache is given back only where it outgrew the evaluation's
reservation (engine/worker/memory.py `release_within`): the next step draws the same sizes again, and a cache
within the reservation is memory no other evaluation was promised. Alone (no reservation) it always goes."""

from __future__ import annotations

import pytest
import torch
from cudaforge.engine.worker import memory


@pytest.mark.gpu
def test_a_cache_within_the_reservation_stays_and_one_beyond_it_goes() -> None:
    block = 256 << 20
    memory.release()
    x = torch.empty(block, dtype=torch.uint8, device="cuda")
    del x
    held = int(torch.cuda.memory_reserved())
    assert held >= block and torch.cuda.memory_allocated() < block
    memory.release_within(held)
    assert torch.cuda.memory_reserved() == held, "within the reservation: the next step takes it back"
    memory.release_within(held - 1)
    assert torch.cuda.memory_reserved() < block, "beyond it: given back"
    y = torch.empty(block, dtype=torch.uint8, device="cuda")
    del y
    memory.release_within(None)
    assert torch.cuda.memory_reserved() < block, "no reservation (one evaluation alone): always given back"


def test_on_the_host_it_is_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off CUDA there is no cache to keep: release_within is release() whatever the reservation."""
    calls: list[int] = []
    monkeypatch.setattr(memory, "release", lambda *a, **k: calls.append(1))
    monkeypatch.setattr(memory, "_cuda", lambda: False)
    memory.release_within(1 << 40)
    memory.release_within(None)
    assert calls == [1, 1]
