"""Host buffers reused for the large copies that wait on the host (engine/worker/host_buffers.py): a buffer
serves the next copy only once nothing refers to the last one, views included, and the pool keeps no more
than its budget (the evaluation's host estimate)."""

from __future__ import annotations

import os

import pytest
import torch
from cudaforge.engine.worker.host_buffers import HostBuffers

MIB = 1 << 20


def _copy(pool: HostBuffers, value: torch.Tensor) -> torch.Tensor:
    h = pool.empty_like(value)
    assert h is not None
    h.copy_(value)
    return h


def test_a_dropped_copy_lends_its_memory_to_the_next_and_a_kept_one_does_not() -> None:
    pool = HostBuffers(budget=64 * MIB)
    value = torch.randn(1024, 1024)  # 4 MiB
    first = _copy(pool, value)
    assert torch.equal(first, value) and pool.made == 1
    second = _copy(pool, value * 2)  # the first is still held: new memory
    assert pool.made == 2 and first.data_ptr() != second.data_ptr() and torch.equal(first, value)
    kept_ptr = first.data_ptr()
    del first
    third = _copy(pool, value * 3)
    assert pool.reused == 1 and third.data_ptr() == kept_ptr and torch.equal(third, value * 3)
    assert torch.equal(second, value * 2)  # untouched by the reuse


def test_a_view_of_a_copy_keeps_its_buffer_busy() -> None:
    pool = HostBuffers(budget=64 * MIB)
    value = torch.randn(512, 1024)
    copy = _copy(pool, value)
    rows = copy[100:200]  # e.g. a compare's slice
    del copy
    other = _copy(pool, torch.zeros(512, 1024))
    assert pool.reused == 0 and torch.equal(rows, value[100:200]) and other.abs().sum() == 0
    del rows
    _copy(pool, value)
    assert pool.reused == 1


def test_shape_and_dtype_of_the_value_over_a_close_fit() -> None:
    pool = HostBuffers(budget=64 * MIB)
    big = _copy(pool, torch.randn(1000, 1000))  # 4,000,000 bytes
    del big
    half = pool.empty_like(torch.zeros(1900, 1000, dtype=torch.float16))  # 3,800,000 bytes: within 25%
    assert half is not None and pool.reused == 1 and half.shape == (1900, 1000) and half.dtype == torch.float16
    del half
    small = pool.empty_like(torch.zeros(1000, dtype=torch.int64))  # far smaller: its own buffer
    assert small is not None and pool.made == 2 and pool.reused == 1


def test_the_pool_keeps_within_its_budget_and_trim_drops_what_is_free() -> None:
    pool = HostBuffers(budget=10 * MIB)
    a = _copy(pool, torch.randn(MIB // 4 * 4))  # 4 MiB
    b = _copy(pool, torch.randn(MIB // 4 * 4))
    del a, b
    assert pool.retained_bytes() == 8 * MIB
    c = _copy(pool, torch.randn(MIB // 2 * 3))  # 6 MiB: no fit among the free; keeping all would be 14 MiB
    assert pool.retained_bytes() <= 10 * MIB, pool.retained_bytes()
    pool.trim()
    assert pool.retained_bytes() == 6 * MIB  # only the one still in use
    del c
    pool.trim()
    assert pool.retained_bytes() == 0


def test_a_free_buffer_behind_a_busy_one_is_dropped_by_identity() -> None:
    """The H200 sweep's level1/87 (an 8 GiB output, 4 GiB inputs): the second expected output needed a new
    buffer, the pool dropped the free input-sized one listed after the busy output-sized one, and
    `list.remove` compared the two buffers' tensors element by element (a size-mismatch RuntimeError;
    with equal sizes, an ambiguous truth value or a full elementwise pass)."""
    pool = HostBuffers(budget=16 * MIB)
    big = torch.randn(2 * MIB)  # 8 MiB, like the output
    first = _copy(pool, big)  # kept: busy
    small = _copy(pool, torch.randn(MIB))  # 4 MiB, like an input
    del small  # free, listed after the busy one
    second = _copy(pool, big * 2)  # no fit: the free 4 MiB one is dropped to make room within 16 MiB
    assert pool.made == 3 and pool.retained_bytes() == 16 * MIB
    assert torch.equal(first, big) and torch.equal(second, big * 2)
    del first
    same_size = _copy(pool, big * 3)  # reuses the first; two equal-sized buffers now listed
    del second
    pool.trim()  # drops the free one of two equal-sized buffers, behind the busy one
    assert pool.retained_bytes() == 8 * MIB and torch.equal(same_size, big * 3)


def test_no_budget_or_a_layout_that_is_not_dense_is_not_served() -> None:
    """A dense layout other than contiguous (a transposed output) is served in that same layout, so the copy
    into it is one straight pass; a layout with gaps or overlaps, no budget or no elements is not."""
    assert HostBuffers(budget=0).empty_like(torch.randn(16, 16)) is None
    pool = HostBuffers(budget=64 * MIB)
    transposed = torch.randn(16, 32).t()
    copy = _copy(pool, transposed)
    assert copy.stride() == transposed.stride() and torch.equal(copy, transposed)
    assert pool.empty_like(torch.randn(16, 32)[:, ::2]) is None  # gaps between the elements
    assert pool.empty_like(torch.randn(16, 1).expand(16, 8)) is None  # elements that share memory
    assert pool.empty_like(torch.empty(0)) is None


@pytest.mark.gpu
def test_host_copy_on_cuda_reuses_the_buffer_of_a_dropped_copy() -> None:
    """memory.host_copy over PINNED_MAX_BYTES on a GPU: the second copy lands in the first one's buffer,
    with the second tensor's values, while a copy still held keeps its own."""
    from cudaforge.engine.worker import memory
    from cudaforge.engine.worker.host_buffers import POOL

    n = (memory.PINNED_MAX_BYTES + 64 * MIB) // 4
    a = torch.arange(n, dtype=torch.float32, device="cuda")
    budget, POOL.budget = POOL.budget, 4 * n * 4
    try:
        POOL.trim()
        (first,) = memory.host_copy([a])
        ptr, made = first.data_ptr(), POOL.made
        assert torch.equal(first, a.cpu())
        del first
        (second,) = memory.host_copy([a * 2])
        assert second.data_ptr() == ptr and POOL.made == made and torch.equal(second, (a * 2).cpu())
        (third,) = memory.host_copy([a * 3])  # the second is held: a buffer of its own
        assert third.data_ptr() != ptr and torch.equal(second, (a * 2).cpu()) and torch.equal(third, (a * 3).cpu())
    finally:
        POOL.budget = budget
        POOL.trim()


@pytest.mark.gpu
def test_a_large_host_copy_goes_in_pieces_with_a_step_boundary_between_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """memory.host_copy of a tensor over COPY_PIECE_BYTES: the same bytes, and a step boundary
    (observe.checkpoint: a waiting timed window goes first) after every piece."""
    from cudaforge.engine import observe
    from cudaforge.engine.worker import memory

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    monkeypatch.setattr(memory, "COPY_PIECE_BYTES", 4 * MIB)
    seen: list[int] = []
    monkeypatch.setattr(observe, "_CHECKPOINTS", [lambda: seen.append(1)])
    value = torch.randn(10 * MIB // 4 + 3, device="cuda")  # 10 MiB and 12 bytes: three pieces
    (copy,) = memory.host_copy([value])
    assert copy.device.type == "cpu" and torch.equal(copy, value.cpu()) and len(seen) == 3


def test_without_cuda_a_pinning_pool_keeps_its_buffers_pageable() -> None:
    """`pin` asks for page-locked buffers; where CUDA cannot lock them (this CPU machine) the copies still
    land, in pageable memory, and nothing is counted as locked."""
    if torch.cuda.is_available():
        pytest.skip("the CUDA case is the GPU test below")
    pool = HostBuffers(budget=64 * MIB, pin=True)
    value = torch.randn(1024, 1024)
    first = _copy(pool, value)
    assert torch.equal(first, value) and pool.locked == 0 and not pool.buffers[0].locked
    del first
    pool.trim()
    assert pool.buffers == []


def test_a_pinning_pool_locks_and_unlocks_through_its_unheld_runner() -> None:
    """Page-locking a new buffer (a pass over its pages and the driver's registration: seconds for GiBs) and
    unlocking it run through `unheld`, which the worker sets to gpu_share.without_hold so that no timed window
    waits for them; a reused buffer needs neither."""
    ran: list[str] = []

    def unheld(work):  # type: ignore[no-untyped-def]
        ran.append(getattr(work, "func", work).__name__)
        return work()

    pool = HostBuffers(budget=64 * MIB, pin=True, unheld=unheld)
    value = torch.randn(1024, 1024)
    first = _copy(pool, value)
    assert ran == ["page_lock"]
    del first
    second = _copy(pool, value * 2)
    assert ran == ["page_lock"] and pool.reused == 1 and torch.equal(second, value * 2)
    del second
    pool.buffers[0].locked = True  # as on CUDA, where the lock took
    pool.trim()
    assert ran == ["page_lock", "page_unlock"] and pool.buffers == []


@pytest.mark.gpu
def test_host_copy_on_cuda_page_locks_its_buffer_once_and_unlocks_it_when_dropped() -> None:
    """The worker's pool (pin=True on CUDA): a large copy's buffer is page-locked (PyTorch sees it as
    pinned, so copies to and from it are DMA), a second copy reuses it without locking again, a compare
    against the locked copy reads the right values, and trim() unlocks it before letting it go."""
    from cudaforge.engine.worker import compare, memory
    from cudaforge.engine.worker.host_buffers import POOL

    n = (memory.PINNED_MAX_BYTES + 64 * MIB) // 4
    a = torch.randn(n, device="cuda")
    budget, pin = POOL.budget, POOL.pin
    POOL.budget, POOL.pin = 4 * n * 4, True
    try:
        POOL.trim()
        locked = POOL.locked
        (first,) = memory.host_copy([a])
        assert first.is_pinned() and POOL.locked == locked + 1 and torch.equal(first, a.cpu())
        check = compare.compare_output(0, first, a.clone(), 1e-6, 1e-6)
        assert check.passed and check.max_abs_err == 0
        del first
        (second,) = memory.host_copy([a * 2])
        assert second.is_pinned() and POOL.locked == locked + 1 and torch.equal(second, (a * 2).cpu())
        base = POOL.buffers[-1].base
        del second
        POOL.trim()
        assert not base.is_pinned()  # unlocked before the pool let it go
    finally:
        POOL.budget, POOL.pin = budget, pin
        POOL.trim()


def _vm_flags(address: int) -> set[str]:
    """The VmFlags of this process's mapping that holds `address` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps", encoding="ascii") as fh:
        for line in fh:
            head = line.split()[0] if line.strip() else ""
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and line.startswith("VmFlags:"):
                return set(line.split()[1:])
    return set()


@pytest.mark.skipif(not os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"),
                    reason="no transparent huge pages in this kernel")
def test_a_new_large_buffer_is_advised_for_huge_pages_before_its_first_touch() -> None:
    """Every evaluation pays its buffers' first pass (page faults) again: advised, a fault maps 2 MiB."""
    pool = HostBuffers(budget=64 * MIB)
    value = torch.randn(8 * MIB // 4)
    copy = _copy(pool, value)
    assert pool.huge == 1 and torch.equal(copy, value)
    assert "hg" in _vm_flags(copy.data_ptr() + 4 * MIB)  # VM_HUGEPAGE on the buffer's middle
    small_value = torch.randn(1024)
    small = _copy(pool, small_value)  # under one huge page: left as it is
    assert pool.huge == 1 and torch.equal(small, small_value)
    # Without the advice the pool advises nothing. Its buffer's mapping is not checked for the flag: once glibc's
    # mmap threshold has risen past this size (a freed large block raises it), the buffer comes from the heap and
    # may reuse memory an earlier advised buffer had; a free leaves the flag on it (a full CI run saw that once).
    plain = HostBuffers(budget=64 * MIB, huge_pages=False)
    other = _copy(plain, value)
    assert plain.huge == 0 and torch.equal(other, value)


def test_a_large_buffers_registration_is_logged_as_hold_free_driver_work(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A page-lock or unlock of a buffer of DRIVER_LOG_BYTES or more holds no GPU lock but is driver work (as a
    context's creation is): its begin and end go to the lock log, where bench/windows_beside_creations.py
    counts the windows it overlapped. Smaller buffers leave no line."""
    from cudaforge.engine.gpu import rwlock
    from cudaforge.engine.worker import host_buffers

    log = tmp_path / "lock.log"
    monkeypatch.setenv(rwlock.LOG_ENV, str(log))
    monkeypatch.setattr(host_buffers, "DRIVER_LOG_BYTES", 4096)
    with host_buffers._logged("pin", torch.empty(1024, dtype=torch.float32)):  # 4096 bytes: logged
        pass
    with host_buffers._logged("unpin", torch.empty(1023, dtype=torch.float32)):  # under: no line
        pass
    with pytest.raises(RuntimeError), host_buffers._logged("unpin", torch.empty(2048, dtype=torch.float32)):
        raise RuntimeError("the driver call failed")  # its end is logged all the same
    lines = [line.split()[2:4] for line in log.read_text().splitlines()]
    assert lines == [["begin", "pin"], ["end", "pin"], ["begin", "unpin"], ["end", "unpin"]]
