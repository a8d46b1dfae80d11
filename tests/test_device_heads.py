"""Device heads of parked outputs (engine/worker/device_heads.py): a compare reads the slices of a parked host
copy that lie within its head from the head, everything else from the host copy, and a head goes with its
host copy. On the CPU device the "device" tensor is a host tensor too, so the reads are told apart by values
written into the host copy's head region only; the GPU test runs a real evaluation whose output is parked."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest
import torch
from cudaforge.engine.worker import compare, device_heads

LARGE = Path(__file__).parent / "tasks" / "large_output"


@pytest.fixture
def slices(monkeypatch: pytest.MonkeyPatch) -> int:
    """Compares in slices of 100 elements."""
    monkeypatch.setattr(compare, "_CHUNK", 100)
    return 100


def _parked(n: int = 1000, head: int = 400) -> tuple[torch.Tensor, torch.Tensor]:
    original = torch.randn(n)
    host = original.clone()
    assert device_heads.keep(original, host, head * 4 + 3) == head * 4  # whole elements only
    return original, host


def test_slices_within_the_head_are_read_from_it_and_the_rest_from_the_host(slices: int) -> None:
    original, host = _parked()
    host[:400] = 1e6  # only the head's copy still holds the output's values there
    got = original.clone()
    assert compare.compare_output(0, host, got, 1e-4, 1e-4).passed
    host[650] = 1e6  # beyond the head: the host copy is what is compared
    check = compare.compare_output(0, host, got, 1e-4, 1e-4)
    assert not check.passed and check.mismatches == 1
    assert [w.index for w in check.worst] == [(650,)]


def test_a_slice_across_the_heads_end_comes_from_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compare, "_CHUNK", 300)  # slices [0, 300) from the head, [300, 600) across its end
    original, host = _parked()
    host[350] = 1e6
    check = compare.compare_output(0, host, original.clone(), 1e-4, 1e-4)
    assert check.mismatches == 1 and [w.index for w in check.worst] == [(350,)]


def test_without_a_head_the_host_copy_is_compared(slices: int) -> None:
    original = torch.randn(1000)
    host = original.clone()
    host[:400] = 1e6
    assert compare.compare_output(0, host, original.clone(), 1e-4, 1e-4).mismatches == 400


def test_a_head_goes_with_its_host_copy() -> None:
    before = device_heads.live_bytes()
    original, host = _parked()
    assert device_heads.live_bytes() == before + 1600
    del host
    gc.collect()
    assert device_heads.live_bytes() == before
    assert device_heads.on_device(original[:100]) is None  # another tensor's memory is never looked up as a copy


def test_no_head_for_another_layout_dtype_or_no_room() -> None:
    original = torch.randn(64, 32)
    transposed = torch.empty_strided((64, 32), (1, 64))  # the same shape, another layout
    assert device_heads.keep(original, transposed, 1 << 20) == 0
    assert device_heads.keep(original, original.clone().double(), 1 << 20) == 0
    assert device_heads.keep(original, original.clone(), 3) == 0  # room for less than one element


@pytest.mark.gpu
def test_a_parked_output_is_compared_from_its_head_on_the_gpu(gpu_options) -> None:
    """A real evaluation of a task whose 2 GiB output cannot wait on the device whole beside the reference's
    4 GiB peak: it waits on the host with a device head; the compares read part of it there, the verdict is
    the expected one and the evaluation stays within the memory rule."""
    from cudaforge.engine.candidate import load_candidate
    from cudaforge.engine.evaluation.evaluator import Evaluator
    from cudaforge.engine.task import load_task

    result = asyncio.run(Evaluator(gpu_options).evaluate(load_task(LARGE / "task.py"),
                                                         load_candidate(LARGE / "reference.py")))
    assert result.outcome == "integrity_failure", result.message + result.traceback + result.stderr_tail
    assert [f.name for f in result.failing_findings()] == ["no_custom_kernel"]
    assert result.correctness is not None and result.correctness.passed
    m = result.memory
    assert m is not None and m.ratio is not None and m.ratio <= 1.25, m
    assert m.compared_on_device_bytes and m.compared_from_host_bytes, m
    on_device = m.compared_on_device_bytes / (m.compared_on_device_bytes + m.compared_from_host_bytes)
    print(f"parked compares: {m.compared_on_device_bytes / 2**30:.1f} GiB from device heads, "
          f"{m.compared_from_host_bytes / 2**30:.1f} GiB from the host ({on_device:.0%} on the device); "
          f"peak ratio {m.ratio}")
    assert on_device > 0.3


def test_head_room_is_the_rules_bound_less_what_stays_and_what_the_next_call_adds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """memory.head_room for a 6 GiB elementwise output of a 12 GiB reference (inputs 6 GiB): 1.25 x 12 GiB
    + 0.5 GiB, less the 6 GiB of inputs that stay and the 6 GiB the next call adds, is 3.5 GiB; a second
    input set beside them, a tighter cap or a smaller fit estimate leaves less; no estimate, none."""
    from cudaforge.engine.worker import memory

    gib = memory.GIB
    held = {"bytes": 12 * gib}  # the inputs and the output being parked
    monkeypatch.setattr(memory, "held_allocated", lambda: held["bytes"])
    monkeypatch.setattr(memory, "REFERENCE_IO", {"peak_bytes": 12 * gib, "input_bytes": 6 * gib})
    monkeypatch.setattr(memory, "ESTIMATE", {"bytes": 16 * gib})
    monkeypatch.setattr(memory, "CAP", {"bytes": 24 * gib})
    assert memory.head_room(6 * gib) == int(3.5 * gib)
    held["bytes"] = 13 * gib  # a 1 GiB second input set beside the first (the cache probes' fresh draw)
    assert memory.head_room(6 * gib) == int(2.5 * gib)
    held["bytes"] = 12 * gib
    monkeypatch.setattr(memory, "CAP", {"bytes": 14 * gib})
    assert memory.head_room(6 * gib) == int(1.75 * gib)  # 14 - 0.25 - 12
    monkeypatch.setattr(memory, "CAP", {})
    monkeypatch.setattr(memory, "ESTIMATE", {"bytes": 13 * gib})
    assert memory.head_room(6 * gib) == int(0.75 * gib)  # 13 - 0.25 - 12
    monkeypatch.setattr(memory, "ESTIMATE", {})
    assert memory.head_room(6 * gib) == 0
