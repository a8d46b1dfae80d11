"""A process's CUDA context, made with no device work of ours beside it.

Creating the primary context is driver work: it maps the context's own memory and sets up the device for
this process, but it launches no kernel and makes no allocation of ours. Another process's context
creations changed nothing measurable in a timed window (bench/window_disturbance.py, conditions `context`
and `spare-context`), so it needs no hold of the GPU lock: a spare makes its context while a window runs
elsewhere, and the window never waits for it (docs/ARCHITECTURE.md, "Sharing the GPU"). What comes after,
the first kernels and allocations, is device work and runs under a read hold.
"""

from __future__ import annotations


def open_context(gpu: int) -> None:
    """Create (or take) this process's primary context on `gpu` and make that device current, launching
    nothing and allocating nothing through PyTorch's allocator: `cudaDeviceSynchronize` initializes the
    runtime's context on the current device and, with nothing queued, returns at once."""
    import torch
    from cudaforge.engine.gpu.rwlock import log_event

    made = not torch.cuda.is_initialized()  # else the context exists: nothing to show
    if made:  # no hold, but the lock log shows what a creation overlapped (bench/lock_timeline.py)
        log_event("begin", "context")
    try:
        torch.cuda.set_device(gpu)
        torch.cuda.synchronize(gpu)
    finally:
        if made:
            log_event("end", "context")


def context_is_current() -> bool:
    """Whether this thread has a current CUDA context (the driver's own answer, for tests and benches)."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    ctx = ctypes.c_void_p()
    return cuda.cuCtxGetCurrent(ctypes.byref(ctx)) == 0 and bool(ctx.value)
