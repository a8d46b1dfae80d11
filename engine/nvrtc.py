"""The runtime helper that `nvrtc`-format candidates import: CUDA source in, a launchable kernel out.

Kernels are compiled with NVRTC (through PyTorch's bundled wrapper, the one place that touches a
private torch API), cached on disk by content hash, loaded with the CUDA driver API and launched on
PyTorch's *current* stream. Scalars are packed by the C type each parameter is declared with in the
kernel's signature, so a Python float reaches a `float` parameter as 4 bytes on every torch version.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

_POINTER = "pointer"
# C type spelling (whitespace-normalised) -> ctypes type
_SCALAR_TYPES: dict[str, Any] = {
    "bool": ctypes.c_bool,
    "char": ctypes.c_char,
    "signed char": ctypes.c_int8,
    "unsigned char": ctypes.c_uint8,
    "int8_t": ctypes.c_int8,
    "uint8_t": ctypes.c_uint8,
    "short": ctypes.c_int16,
    "unsigned short": ctypes.c_uint16,
    "int16_t": ctypes.c_int16,
    "uint16_t": ctypes.c_uint16,
    "int": ctypes.c_int32,
    "signed": ctypes.c_int32,
    "signed int": ctypes.c_int32,
    "unsigned": ctypes.c_uint32,
    "unsigned int": ctypes.c_uint32,
    "int32_t": ctypes.c_int32,
    "uint32_t": ctypes.c_uint32,
    "long": ctypes.c_int64,
    "long int": ctypes.c_int64,
    "unsigned long": ctypes.c_uint64,
    "long long": ctypes.c_int64,
    "long long int": ctypes.c_int64,
    "unsigned long long": ctypes.c_uint64,
    "unsigned long long int": ctypes.c_uint64,
    "int64_t": ctypes.c_int64,
    "uint64_t": ctypes.c_uint64,
    "size_t": ctypes.c_size_t,
    "ptrdiff_t": ctypes.c_ssize_t,
    "float": ctypes.c_float,
    "double": ctypes.c_double,
}
_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "struct"}
_DRIVER: ctypes.CDLL | None = None
_LOCK = threading.Lock()
_MAX_DYNAMIC_SHARED = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES

# Launch counts per kernel name, read by the worker's "did a custom kernel run" check.
LAUNCH_COUNTS: dict[str, int] = {}
# Disk-cache statistics of this process: NVRTC compilations done and cache hits.
CACHE_STATS: dict[str, int] = {"compiled": 0, "hits": 0}


class NvrtcError(RuntimeError):
    """Compilation or launch failed; the message carries NVRTC's log or the driver's error."""


def _driver() -> ctypes.CDLL:
    global _DRIVER
    if _DRIVER is None:
        _DRIVER = ctypes.CDLL("libcuda.so.1")
    return _DRIVER


def _check(result: int, what: str) -> None:
    if result != 0:
        name = ctypes.c_char_p()
        _driver().cuGetErrorName(result, ctypes.byref(name))
        text = name.value.decode() if name.value else f"CUresult {result}"
        raise NvrtcError(f"{what} failed: {text}")


def parse_signature(source: str, name: str) -> list[str] | None:
    """Parameter C types of `__global__ ... name(...)` in `source`; None when it cannot be found.

    Each entry is "pointer" or a normalised scalar type spelling.
    """
    base = name.split("<", 1)[0].strip()
    match = re.search(r"__global__[^;{(]*?\b" + re.escape(base) + r"\s*\(([^)]*)\)", source, re.S)
    if match is None:
        return None
    params = re.sub(r"/\*.*?\*/|//[^\n]*", " ", match.group(1), flags=re.S).strip()
    if not params or params == "void":
        return []
    kinds: list[str] = []
    for raw in params.split(","):
        text = raw.split("=", 1)[0]
        if "*" in text or "[" in text or "&" in text:
            kinds.append(_POINTER)
            continue
        words = [w for w in re.findall(r"[A-Za-z_][A-Za-z_0-9:]*", text) if w not in _QUALIFIERS]
        words = [w.removeprefix("std::") for w in words]
        # Drop the parameter's own name (last word) when a type precedes it.
        type_words = words[:-1] if len(words) > 1 else words
        kinds.append(" ".join(type_words))
    return kinds


def _cache_dir() -> Path | None:
    root = os.environ.get("CUDAFORGE_NVRTC_CACHE")
    return Path(root) if root else None


def _compile(source: str, name: str, options: Sequence[str], arch: str) -> tuple[bytes, str]:
    key = hashlib.sha256(
        "\0".join([source, name, arch, *options, torch.__version__, str(torch.version.cuda)]).encode()
    ).hexdigest()[:32]
    cache = _cache_dir()
    if cache is not None:
        cubin_path, name_path = cache / f"{key}.cubin", cache / f"{key}.name"
        if cubin_path.exists() and name_path.exists():
            CACHE_STATS["hits"] += 1
            return cubin_path.read_bytes(), name_path.read_text()
    from torch.cuda import _utils as torch_cuda_utils  # the single private-torch touch point

    try:
        binary, mangled = torch_cuda_utils._nvrtc_compile(source, name, arch, None, list(options) or None)
    except RuntimeError as exc:
        raise NvrtcError(str(exc)) from None
    CACHE_STATS["compiled"] += 1
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        for path, data in ((cubin_path, binary), (name_path, mangled.encode())):
            tmp = path.with_suffix(path.suffix + f".{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
    return binary, mangled


@dataclass
class Kernel:
    """A loaded CUDA kernel; call it like `kernel(grid=(g,), block=(b,), args=(...), shared_mem=0)`."""

    name: str
    function: ctypes.c_void_p
    module: ctypes.c_void_p
    param_types: list[str] | None
    _shared_configured: int = 0

    def __call__(
        self,
        grid: Sequence[int] = (1,),
        block: Sequence[int] = (1,),
        args: Sequence[Any] = (),
        shared_mem: int = 0,
        stream: torch.cuda.Stream | None = None,
    ) -> None:
        g = _dims(grid, "grid")
        b = _dims(block, "block")
        packed = self._pack(args)
        if shared_mem >= 48 * 1024 and shared_mem > self._shared_configured:
            _check(
                _driver().cuFuncSetAttribute(self.function, _MAX_DYNAMIC_SHARED, int(shared_mem)),
                f"raising dynamic shared memory of {self.name} to {shared_mem} bytes",
            )
            self._shared_configured = int(shared_mem)
        if stream is None:
            stream = torch.cuda.current_stream()
        pointers = (ctypes.c_void_p * len(packed))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in packed])
        _check(
            _driver().cuLaunchKernel(
                self.function, *g, *b, int(shared_mem), ctypes.c_void_p(stream.cuda_stream), pointers, None
            ),
            f"launching {self.name}",
        )
        LAUNCH_COUNTS[self.name] = LAUNCH_COUNTS.get(self.name, 0) + 1

    def _pack(self, args: Sequence[Any]) -> list[Any]:
        types = self.param_types
        if types is not None and len(types) != len(args):
            raise NvrtcError(f"{self.name} takes {len(types)} arguments, got {len(args)}")
        packed: list[Any] = []
        for i, arg in enumerate(args):
            declared = types[i] if types is not None else None
            if isinstance(arg, torch.Tensor):
                if not arg.is_cuda:
                    raise NvrtcError(f"{self.name}: argument {i} is a {arg.device} tensor; kernels need CUDA tensors")
                packed.append(ctypes.c_void_p(arg.data_ptr()))
            elif isinstance(arg, ctypes._SimpleCData):
                packed.append(arg)
            elif declared == _POINTER:
                if isinstance(arg, int):
                    packed.append(ctypes.c_void_p(arg))
                else:
                    raise NvrtcError(f"{self.name}: argument {i} is declared as a pointer but got {type(arg).__name__}")
            elif declared is not None and declared in _SCALAR_TYPES:
                packed.append(_SCALAR_TYPES[declared](arg))
            elif declared is None:
                raise NvrtcError(
                    f"{self.name}: cannot read the kernel's signature; pass scalar argument {i} as a ctypes value"
                )
            else:
                raise NvrtcError(
                    f"{self.name}: parameter {i} has type '{declared}', which the helper cannot pack from a "
                    f"Python {type(arg).__name__}; pass a ctypes value"
                )
        return packed


def _dims(dims: Sequence[int] | int, what: str) -> tuple[int, int, int]:
    if isinstance(dims, int):
        dims = (dims,)
    values = [int(d) for d in dims]
    if not 1 <= len(values) <= 3 or any(v < 1 for v in values):
        raise NvrtcError(f"{what} must be 1 to 3 positive integers, got {tuple(dims)}")
    return tuple(values + [1] * (3 - len(values)))  # type: ignore[return-value]


def load_kernel(source: str, name: str, *, options: Sequence[str] = (), device: int | None = None) -> Kernel:
    """Compile `name` from `source` with NVRTC (cached) and load it on the current CUDA device."""
    if not torch.cuda.is_available():
        raise NvrtcError("NVRTC kernels need a CUDA device, and none is available")
    index = torch.cuda.current_device() if device is None else device
    major, minor = torch.cuda.get_device_capability(index)
    with _LOCK:
        binary, mangled = _compile(source, name, tuple(options), f"{major}{minor}")
        torch.cuda.init()
        with torch.cuda.device(index):
            torch.zeros(1, device=f"cuda:{index}")  # make sure the primary context is current
            module = ctypes.c_void_p()
            _check(_driver().cuModuleLoadData(ctypes.byref(module), binary), f"loading module of {name}")
            function = ctypes.c_void_p()
            _check(
                _driver().cuModuleGetFunction(ctypes.byref(function), module, mangled.encode()),
                f"finding {name} in its module",
            )
    return Kernel(name=name.split("<", 1)[0], function=function, module=module, param_types=parse_signature(source, name))
