"""NVML read in-process (ctypes over the driver's libnvidia-ml): each compute process's device memory on a
GPU, at the moment it is asked, and the GPU's free memory.

Why not nvidia-smi: it takes a tenth of a second or more to list the processes while the card is busy,
and a reading of the card's free memory taken that far from a listing of our processes' usage counts any
allocation made in between twice (in the free memory before it, in the usage after it). On the H200 sweep
of 2026-12-06 (session 33) the memory admission's budget read that way admitted more than the card held,
and a worker ran out of memory within its own reservation. An NVML call takes microseconds and makes no
CUDA context, so the app process may use it too. No import of torch here.

Everything answers None where NVML cannot say (no driver library, no such GPU, a call refused): callers
fall back to nvidia-smi or to what they did without it.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

_SUCCESS = 0
_INSUFFICIENT_SIZE = 7
_NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF  # usedGpuMemory where the driver cannot say (some containers, MIG)
_LIBRARY_NAMES = ("libnvidia-ml.so.1", "libnvidia-ml.so")


class _ProcessInfo(ctypes.Structure):
    """nvmlProcessInfo_t of the _v2 and _v3 calls (ctypes pads it as the C compiler does)."""

    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class _ProcessInfoV1(ctypes.Structure):
    """nvmlProcessInfo_v1_t: what the unversioned call of drivers before the _v2 calls fills."""

    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class _MemoryInfo(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


# Per process: a forked child (a spare forked from the zygote) initialises NVML again for itself.
_STATE: dict[str, Any] = {"pid": None, "library": None, "handles": {}}


def _library() -> Any | None:
    """The initialised NVML library of this process, or None where there is none."""
    if _STATE["pid"] == os.getpid():
        return _STATE["library"]
    _STATE.update(pid=os.getpid(), library=None, handles={})
    for name in _LIBRARY_NAMES:
        try:
            library = ctypes.CDLL(name)
        except OSError:
            continue
        init = getattr(library, "nvmlInit_v2", None) or getattr(library, "nvmlInit", None)
        if init is not None and init() == _SUCCESS:
            _STATE["library"] = library
        break
    return _STATE["library"]


def _handle(index: int) -> Any | None:
    """The device handle of CUDA device `index` (mapped through CUDA_VISIBLE_DEVICES to NVML's numbering or
    a GPU UUID, as nvidia-smi's `-i` is), or None (a MIG instance, say: callers fall back)."""
    library = _library()
    if library is None:
        return None
    handles: dict[int, Any] = _STATE["handles"]
    if index not in handles:
        visible = [e.strip() for e in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if e.strip()]
        selector = visible[index] if 0 <= index < len(visible) else str(index)
        handle = ctypes.c_void_p()
        try:
            if selector.isdigit():
                get = getattr(library, "nvmlDeviceGetHandleByIndex_v2", None) or library.nvmlDeviceGetHandleByIndex
                status = get(ctypes.c_uint(int(selector)), ctypes.byref(handle))
            elif selector.startswith("GPU-"):
                status = library.nvmlDeviceGetHandleByUUID(selector.encode(), ctypes.byref(handle))
            else:
                return None
        except AttributeError:  # a library without the symbol
            return None
        if status != _SUCCESS:
            return None
        handles[index] = handle
    return handles[index]


def compute_processes(index: int) -> dict[int, int | None] | None:
    """pid -> device bytes of every compute process on GPU `index` (None for a process whose usage the
    driver does not report), or None where NVML cannot list them."""
    library, handle = _library(), _handle(index)
    if library is None or handle is None:
        return None
    for name, info in (("nvmlDeviceGetComputeRunningProcesses_v3", _ProcessInfo),
                       ("nvmlDeviceGetComputeRunningProcesses_v2", _ProcessInfo),
                       ("nvmlDeviceGetComputeRunningProcesses", _ProcessInfoV1)):
        call = getattr(library, name, None)
        if call is None:
            continue
        rows = _listing(call, handle, info)
        if rows is not None:
            return rows
    return None


def _listing(call: Any, handle: Any, info: type[ctypes.Structure]) -> dict[int, int | None] | None:
    count = ctypes.c_uint(0)
    status = call(handle, ctypes.byref(count), None)
    for _ in range(4):  # processes may come between the count and the listing: ask again with room
        if status == _SUCCESS and count.value == 0:
            return {}
        if status not in (_SUCCESS, _INSUFFICIENT_SIZE):
            return None
        room = count.value + 16
        array = (info * room)()
        count = ctypes.c_uint(room)
        status = call(handle, ctypes.byref(count), array)
        if status == _SUCCESS:
            return {int(array[k].pid): (None if int(array[k].usedGpuMemory) == _NOT_AVAILABLE
                                        else int(array[k].usedGpuMemory)) for k in range(count.value)}
    return None


def free_bytes(index: int) -> int | None:
    """GPU `index`'s free memory as the driver counts it now, or None."""
    library, handle = _library(), _handle(index)
    if library is None or handle is None:
        return None
    memory = _MemoryInfo()
    get = getattr(library, "nvmlDeviceGetMemoryInfo", None)
    if get is None or get(handle, ctypes.byref(memory)) != _SUCCESS:
        return None
    return int(memory.free)


def process_bytes(index: int, pid: int | None = None) -> int | None:
    """One process's device memory on GPU `index` (this process by default), or None."""
    rows = compute_processes(index)
    return rows.get(os.getpid() if pid is None else pid) if rows is not None else None
