"""One forward of the candidate under CUDA stream capture, for the side-stream check (integrity/streams.py
says what it proves and when it runs).

The capture runs on a stream created here through the driver, which no candidate code can hold: torch's
pool hands its 32 streams out round robin, so a pool stream could be the candidate's own side stream, and
a "fork" from it would be no fork at all. It is a blocking stream (not cudaStreamNonBlocking): while it
captures, CUDA refuses any use of the legacy default stream, so a kernel the forward sends to stream 0 is
refused (the check then decides nothing) instead of running at once on memory the capture only reserved
(outputs of captured work that never ran). Nothing captured is ever replayed or instantiated: the graph is
only there for the capture to end (or refuse to). Whatever happens, the capture is ended, the capturing
stream is left not capturing, the graph and its private memory pool are given back to the allocator and
the previous current stream is restored, so the evaluation goes on as before.

torch's CUDAGraph.capture_end raises before it tells the allocator that the capture is over when CUDA's
cudaStreamEndCapture fails; the pool is then closed here (`_cuda_endAllocateToPool`, `_cuda_releasePool`),
and the graph object is kept alive for the life of the process (the allocator's filter for the pool
refers to it).
"""

from __future__ import annotations

import contextlib
import ctypes
import warnings
from collections.abc import Callable
from typing import Any

from cudaforge.engine.integrity.streams import CaptureOutcome

_KEPT: list[Any] = []  # graphs whose capture did not end cleanly (see the module's docstring)
_CU_STREAM_DEFAULT = 0x0  # a blocking stream (see the module's docstring)


def error_text(exc: BaseException, limit: int = 400) -> str:
    """An exception as one line: its type and message, whitespace collapsed (CUDA's hint lines included)."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:limit]


def _driver() -> Any:
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuStreamCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
    lib.cuStreamCreate.restype = ctypes.c_int
    lib.cuStreamEndCapture.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.cuStreamEndCapture.restype = ctypes.c_int
    lib.cuGraphDestroy.argtypes = [ctypes.c_void_p]
    lib.cuGraphDestroy.restype = ctypes.c_int
    return lib


def fresh_stream(device: Any) -> tuple[Any, bool]:
    """(a blocking stream created now through the driver, True); (a stream of torch's pool, False) where
    the driver call fails. The stream is never destroyed: one stream for the life of a worker that runs
    one evaluation."""
    import torch

    with contextlib.suppress(Exception):
        handle = ctypes.c_void_p()
        if _driver().cuStreamCreate(ctypes.byref(handle), _CU_STREAM_DEFAULT) == 0 and handle.value:
            return torch.cuda.ExternalStream(handle.value, device=device), True
    return torch.cuda.Stream(device=device), False


def _new_graph() -> Any:
    """A graph that is not instantiated at the end of its capture (nothing is replayed)."""
    import torch

    try:
        return torch.cuda.CUDAGraph(keep_graph=True)
    except TypeError:  # a torch without keep_graph: instantiated at the end, still never replayed
        return torch.cuda.CUDAGraph()


def capture_forward(call: Callable[[list[Any]], Any], inputs: list[Any], device: Any) -> CaptureOutcome:
    """Run `call(inputs)` once under stream capture ("thread_local" mode) on a fresh stream made current,
    and say where it stopped (CaptureOutcome). The inputs are on the device and ready (synchronized here
    first). The candidate's own exceptions are recorded, not raised; BaseExceptions (SystemExit) leave
    after the capture is ended and cleaned up. The caller synchronizes the device afterwards."""
    import torch

    torch.cuda.synchronize(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    previous = torch.cuda.current_stream(device)
    stage, error = "", ""
    ended = fresh = False
    graph: Any = None
    pool: Any = None
    stream: Any = None
    try:
        try:
            stream, fresh = fresh_stream(device)
            pool = torch.cuda.graph_pool_handle()
            graph = _new_graph()
            torch.cuda.set_stream(stream)
            graph.capture_begin(pool=pool, capture_error_mode="thread_local")
        except Exception as exc:
            return CaptureOutcome("begin", error_text(exc), fresh)
        out: Any = None
        try:
            out = call(inputs)
        except Exception as exc:
            stage, error = "forward", error_text(exc)
        finally:
            torch.cuda.set_stream(stream)  # the forward may have changed it: the capture ends where it began
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "The CUDA Graph is empty": all of it ran outside the capture
                try:
                    graph.capture_end()
                    ended = True
                except Exception as exc:
                    if not stage:
                        stage, error = "end", error_text(exc)
            del out  # its memory is the graph's pool's: freed once the capture is over
        return CaptureOutcome(stage, error, fresh)
    finally:
        torch.cuda.set_stream(previous)
        if stream is not None:
            _not_capturing(stream)
        if graph is not None:
            _discard(graph, pool, index, ended)


def _discard(graph: Any, pool: Any, index: int, ended: bool) -> None:
    """Give the graph and its memory pool back. A clean capture: reset() does both. Otherwise end the
    allocator's routing to the pool and release the pool, where capture_begin opened it and capture_end
    did not close it (it raises before it does when CUDA refuses the end); then keep the graph."""
    import torch

    if not ended:
        end_allocate = getattr(torch._C, "_cuda_endAllocateToPool", None) \
            or getattr(torch._C, "_cuda_endAllocateCurrentStreamToPool", None)  # its name before torch 2.8
        try:
            end_allocate(index, pool)  # type: ignore[misc]
        except Exception:
            pass  # never opened, or closed by capture_end itself (then reset() releases it)
        else:
            with contextlib.suppress(Exception):
                torch._C._cuda_releasePool(index, pool)
        _KEPT.append(graph)
    with contextlib.suppress(Exception):
        graph.reset()


def _not_capturing(stream: Any) -> None:
    """Make sure the capturing stream is no longer capturing (capture_end ends it even when it fails; a
    capture_end that refused before reaching CUDA is ended here through the driver)."""
    import torch

    with torch.cuda.stream(stream):
        capturing = torch.cuda.is_current_stream_capturing()
    if not capturing:
        return
    lib = _driver()
    graph = ctypes.c_void_p()
    lib.cuStreamEndCapture(ctypes.c_void_p(stream.cuda_stream), ctypes.byref(graph))
    if graph.value:
        lib.cuGraphDestroy(graph)
    with torch.cuda.stream(stream):
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("the stream-capture check could not end its capture")
