"""Host buffers reused for the large copies that wait on the host (memory.host_copy on CUDA, over
memory.PINNED_MAX_BYTES).

Each such copy used to land in new host memory. New memory is new pages, and the first write into
each page faults and zeroes it, so a copy into new memory runs at the kernel's page-fault rate
rather than at copy bandwidth. On this project's CPU machine a 1 GiB copy into new memory ran at
1.7-1.9 GiB/s and into memory written before at 4-14 GiB/s (bench/host_copy_bench.py). On the H200
machine level1/41's four correctness trials spent 9.6 s on their host copies (the reference's and the
candidate's 3 GiB outputs, each trial), about 2.5 GB/s. The same evaluation makes the same copies
trial after trial, so a buffer kept from one copy serves the next.

A buffer is free when no tensor refers to its memory any more (the storage's use count is back to
what the pool alone holds), so a caller keeps a copy, or a view of it, as long as it likes. What the
pool keeps stays within a budget, the evaluation's host estimate (memory.host_needed_bytes): free
buffers are dropped before a new one would take the pool over it, and all of them by `trim()`. The
pool lives and dies with the worker process, which makes one evaluation.

On CUDA the pool page-locks each buffer it makes (`pin`, cuMemHostRegister), once, and unlocks it before
it lets it go. A copy between the device and pageable memory is staged through the driver's own pinned
buffer by a CPU memcpy, one piece at a time: 16 GB/s into reused pageable memory on the H200, alone, and
less with eight evaluations side by side, each burning a core on the staging. A page-locked buffer is a
DMA target: the copy takes no CPU and runs at the bus's rate. The lock costs one pass over the buffer
(its pages are touched first, on all of torch's threads, rather than faulted one at a time by the
driver), which the same evaluation's next copies pay back: a large output crosses the bus about thirty
times per evaluation (correctness, the cache probes, the timed check). PyTorch's own pinned allocator
is not used for these: it rounds each block up to a power of two and keeps it (memory.PINNED_MAX_BYTES).

A new buffer is advised to the kernel for transparent huge pages (madvise MADV_HUGEPAGE) before anything
touches it: each first-touch fault then maps and zeroes 2 MiB instead of 4 KiB. Every evaluation is a new
process, so every evaluation of a large problem pays its buffers' first pass again, tens of GiB on the
large level-1 problems. A 2 GiB first copy into a new page-locked buffer ran at 10.25 GiB/s with 4 KiB
pages and 14.83 GiB/s advised on an H100 machine (THP "madvise"); a first host copy into a new buffer at 1.63
and 6.32 GiB/s on this project's CPU machine (bench/host_copy_bench.py, "first copy" rows). Where the kernel
has no transparent huge pages, or they are off, the advice changes nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# A free buffer serves a copy up to this much smaller than itself (the rest of it is idle meanwhile).
SLACK_FRACTION = 0.25
MADV_HUGEPAGE = 14  # linux/mman.h
HUGE_PAGE_BYTES = 2 << 20  # x86-64's and aarch64's (4 KiB base pages) transparent huge page


@dataclass(eq=False)  # identity: list.remove must never compare two buffers' tensors element by element
class _Buffer:
    base: Any  # a 1-D uint8 host tensor
    idle_count: int  # its storage's use count when nothing but the pool holds it
    locked: bool = False  # page-locked (cuMemHostRegister): unlocked before the pool lets it go


@dataclass
class HostBuffers:
    """The pool (one per worker process: `POOL`). `budget` 0 keeps nothing: every copy takes new memory."""

    budget: int = 0
    pin: bool = False  # page-lock the buffers it makes (the worker on CUDA; see the module's docstring)
    huge_pages: bool = True  # advise new buffers for transparent huge pages (off: the bench's 4 KiB rows)
    # Runs a page-lock or unlock (host and driver work) for the pool: the worker's lets its read hold of the GPU
    # go meanwhile (gpu_share.without_hold), so a timed window elsewhere does not wait for it.
    unheld: Callable[[Callable[[], Any]], Any] = field(default=lambda work: work())
    buffers: list[_Buffer] = field(default_factory=list)
    reused: int = 0  # copies served from a kept buffer (for tests and the memory notes)
    made: int = 0
    locked: int = 0  # buffers page-locked
    huge: int = 0  # buffers advised for transparent huge pages

    def retained_bytes(self) -> int:
        return sum(int(b.base.numel()) for b in self.buffers)

    def empty_like(self, value: Any) -> Any | None:
        """An uninitialised host tensor with `value`'s shape, dtype and strides over a kept or new buffer, or
        None where the pool does not serve it (no budget, a layout that is not dense, no use counts)."""
        import torch
        from cudaforge.engine.observe import memory_order

        if self.budget <= 0 or memory_order(value) is None or value.numel() == 0 or _use_count() is None:
            return None
        nbytes = int(value.numel()) * int(value.element_size())
        buffer = self._free_fit(nbytes)
        if buffer is None:
            self._drop_free(keep_within=self.budget - nbytes)
            buffer = _Buffer(base=torch.empty(nbytes, dtype=torch.uint8), idle_count=0)
            if self.huge_pages:
                self.huge += advise_huge_pages(buffer.base)
            buffer.idle_count = _count(buffer.base)
            if self.pin:
                buffer.locked = bool(self.unheld(functools.partial(page_lock, buffer.base)))
                self.locked += buffer.locked
            self.buffers.append(buffer)
            self.made += 1
        else:
            self.reused += 1
        # In `value`'s own dense layout (a transposed attention output stays transposed): the copy into it is
        # one straight pass over memory.
        return buffer.base[:nbytes].view(value.dtype).as_strided(value.shape, value.stride())

    def trim(self) -> None:
        """Drop every free buffer (a step that needs them no more, the worker letting the GPU go)."""
        self._drop_free(keep_within=0)

    def _free_fit(self, nbytes: int) -> _Buffer | None:
        fits = [b for b in self.buffers
                if nbytes <= b.base.numel() <= nbytes * (1 + SLACK_FRACTION) and self._is_free(b)]
        return min(fits, key=lambda b: int(b.base.numel())) if fits else None

    def _drop_free(self, keep_within: int) -> None:
        """Drop free buffers, largest first, until what the pool keeps is within `keep_within` bytes (a
        page-locked one unlocked first, once the device has finished any copy queued on it)."""
        for b in sorted(self.buffers, key=lambda b: -int(b.base.numel())):
            if self.retained_bytes() <= max(0, keep_within):
                return
            if self._is_free(b):
                if b.locked:
                    self.unheld(functools.partial(page_unlock, b.base))
                self.buffers.remove(b)

    @staticmethod
    def _is_free(b: _Buffer) -> bool:
        return _count(b.base) == b.idle_count


def advise_huge_pages(base: Any) -> bool:
    """Advise a new host tensor's memory for transparent huge pages, before its first touch (see the module's
    docstring); whether the kernel took the advice. Only whole base pages inside the tensor are advised: an
    allocation's neighbours keep theirs, and the kernel maps a huge page only where a 2 MiB-aligned stretch
    lies in one mapping, so nothing outside the tensor is touched or kept. False, and nothing done, off
    Linux, below 2 MiB, or where libc has no madvise."""
    nbytes = int(base.numel()) * int(base.element_size())
    if nbytes < HUGE_PAGE_BYTES or not hasattr(os, "sysconf"):
        return False
    page = os.sysconf("SC_PAGE_SIZE")
    start = (int(base.data_ptr()) + page - 1) // page * page
    end = (int(base.data_ptr()) + nbytes) // page * page
    madvise = _madvise()
    if madvise is None or end - start < HUGE_PAGE_BYTES:
        return False
    return madvise(start, end - start, MADV_HUGEPAGE) == 0


@functools.cache
def _madvise() -> Any:
    """libc's madvise through ctypes, or None where there is none (looked up once)."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


DRIVER_LOG_BYTES = 256 << 20  # page-locks and unlocks of buffers this large go to the lock log


@contextlib.contextmanager
def _logged(kind: str, base: Any) -> Any:
    """`begin`/`end` of `kind` in the lock log around a large buffer's (un)registration: driver work that holds
    no GPU lock, like a context's creation, which slowed other processes' driver calls inside timed windows
    (bench/windows_beside_creations.py counts the windows each kind overlapped)."""
    from cudaforge.engine.gpu.rwlock import log_event

    large = base.numel() * base.element_size() >= DRIVER_LOG_BYTES
    if large:
        log_event("begin", kind)
    try:
        yield
    finally:
        if large:
            log_event("end", kind)


def page_lock(base: Any) -> bool:
    """Page-lock a host tensor's memory for DMA; whether it worked (where it does not, e.g. no CUDA, the
    buffer stays pageable and copies take the staged path). The pages are touched first on all of torch's
    CPU threads: the driver would fault them in one at a time. Through the driver API (cuMemHostRegister),
    not the runtime's: a refusal there would stay in the runtime's last error, and PyTorch's next kernel
    launch check would raise it as its own."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return False
    try:
        from cudaforge.engine.nvrtc import _driver

        register = _driver().cuMemHostRegister_v2
        register.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
        register.restype = ctypes.c_int
        base.zero_()
        with _logged("pin", base):
            return register(base.data_ptr(), base.numel() * base.element_size(), 0) == 0
    except (OSError, AttributeError, RuntimeError):  # no driver library or symbol: pageable copies still work
        return False


def page_unlock(base: Any) -> None:
    """Undo page_lock, after the device finished every copy queued on the memory (they are async)."""
    import torch

    with contextlib.suppress(Exception):
        from cudaforge.engine.nvrtc import _driver

        torch.cuda.synchronize()
        unregister = _driver().cuMemHostUnregister
        unregister.argtypes = [ctypes.c_void_p]
        unregister.restype = ctypes.c_int
        with _logged("unpin", base):
            unregister(base.data_ptr())


@functools.cache
def _use_count() -> Any:
    """torch's storage use-count reader (torch._C._storage_Use_Count, in every torch this project supports),
    or None where this torch has none: then the pool serves nothing. Looked up once, torch imported lazily."""
    import torch

    return getattr(torch._C, "_storage_Use_Count", None)


def _count(t: Any) -> int:
    """How many holders the storage under `t` has (the reading's own temporary included, every time)."""
    return int(_use_count()(t.untyped_storage()._cdata))


def storage_holders(storage: Any) -> int | None:
    """How many holders a storage handle's memory has, the handle included; None where torch cannot say."""
    reader = _use_count()
    return int(reader(storage._cdata)) if reader is not None else None


POOL = HostBuffers()
