"""A process's CUDA context, made with no device work of ours beside it.

Creating the primary context is driver work: it maps the context's own memory and sets up the device for
this process, but it launches no kernel and makes no allocation of ours. Another process's context
creations changed nothing measurable in a timed window's calls (bench/window_disturbance.py, conditions
`context` and `spare-context`), so it needs no hold of the GPU lock, and no window ever waits for one
(docs/ARCHITECTURE.md, "Sharing the GPU"). But it slows other processes' driver calls: a window's CUPTI
start, held alone, took a median 58 ms beside one against 9 ms without (H200 sweep, session 39). So a
creation starts between windows (rwlock.between_windows): not while a writer waits or holds, and a writer
that comes while it runs still goes first. What comes after, the first kernels and allocations, is device
work and runs under a read hold.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

CONTEXT_ADMISSION_TIMEOUT_S = 60.0  # then the context is made anyway, as before admissions existed


def open_context(gpu: int, lock_path: str | None = None, go: Callable[[], bool] = lambda: False) -> float:
    """Create (or take) this process's primary context on `gpu` and make that device current, launching
    nothing and allocating nothing through PyTorch's allocator: `cudaDeviceSynchronize` initializes the
    runtime's context on the current device and, with nothing queued, returns at once. Returns the seconds
    it waited for a gap between timed windows (0.0 without `lock_path`); `go()` true ends that wait (a
    spare handed its job needs its context now).

    With `lock_path`, a context that is not there yet is first admitted by memory (engine/gpu/ledger.py):
    the budget that admits our evaluations sets aside a context for each of our processes it sees, so one
    made after another evaluation's admission would take memory promised to it. On the H200 sweep of
    session 33 eight spares made theirs (5 GiB) just after the first eight evaluations were admitted, and
    one of those ran out of memory inside its reservation. The context's reservation goes once it exists:
    from then on the budget sees it."""
    import torch
    from cudaforge.engine.gpu.rwlock import between_windows, log_event

    made = not torch.cuda.is_initialized()  # else the context exists: nothing to show
    admitted = _admit_context(gpu, lock_path) if made and lock_path else None
    # After its admission (a reservation waits for memory, the gap must be the one it starts in)
    gap_s = between_windows(lock_path, go, kind="context") if made and lock_path else 0.0
    if made:  # no hold, but the lock log shows what a creation overlapped (bench/lock_timeline.py)
        log_event("begin", "context")
    try:
        torch.cuda.set_device(gpu)
        torch.cuda.synchronize(gpu)
    finally:
        if made:
            log_event("end", "context")
        if admitted is not None:
            admitted.release()
    return gap_s


def _admit_context(gpu: int, lock_path: str) -> Any:
    """A ledger reservation of one context's bytes beside our evaluations', read through NVML (this process
    has no CUDA context to ask yet); None where NVML cannot say or admission took too long."""
    from cudaforge.engine.gpu import nvml
    from cudaforge.engine.gpu.ledger import reserve
    from cudaforge.engine.gpu.lock import CONTEXT_BYTES, card_share

    def free() -> int | None:
        return nvml.free_bytes(gpu)

    if free() is None:
        return None

    def budget() -> int:
        share = card_share(gpu, free)
        return share.budget() if share is not None else 0

    return reserve(lock_path, CONTEXT_BYTES, budget, label="context", poll_s=0.05,
                   timeout_s=CONTEXT_ADMISSION_TIMEOUT_S)


def context_is_current() -> bool:
    """Whether this thread has a current CUDA context (the driver's own answer, for tests and benches)."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    ctx = ctypes.c_void_p()
    return cuda.cuCtxGetCurrent(ctypes.byref(ctx)) == 0 and bool(ctx.value)
