"""The runtime helper that `nvrtc`-format candidates import: CUDA source in, a launchable kernel out.

Kernels are compiled with NVRTC (through PyTorch's bundled wrapper, the one place that touches a
private torch API), cached on disk by content hash, loaded with the CUDA driver API and launched on
PyTorch's *current* stream. Scalars are packed by the C type each parameter is declared with in the
kernel's signature, so a Python float reaches a `float` parameter as 4 bytes on every torch version.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import re
import struct
from collections.abc import Iterator, Sequence
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
_MAX_DYNAMIC_SHARED = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES

# Launch counts per kernel name, read by the worker's "did a custom kernel run" check.
LAUNCH_COUNTS: dict[str, int] = {}
# Disk-cache statistics of this process: NVRTC compilations done and cache hits.
CACHE_STATS: dict[str, int] = {"compiled": 0, "hits": 0}


@contextlib.contextmanager
def uncounted_compiles() -> Iterator[None]:
    """Compiles that are not the candidate's (the checks' kernels, a profile spare's warm-up kernel): the
    build's "cached" flag reads CACHE_STATS, so they are as they were on leaving."""
    stats = dict(CACHE_STATS)
    try:
        yield
    finally:
        CACHE_STATS.update(stats)


class NvrtcError(RuntimeError):
    """Compilation or launch failed; the message carries NVRTC's log or the driver's error."""


def _driver() -> ctypes.CDLL:
    global _DRIVER
    if _DRIVER is None:
        _DRIVER = ctypes.CDLL("libcuda.so.1")
    return _DRIVER


_LAUNCH: Any = None


def _launch() -> Any:
    """cuLaunchKernel with declared argument types (set once: no per-call type inference)."""
    global _LAUNCH
    if _LAUNCH is None:
        fn = _driver().cuLaunchKernel
        fn.argtypes = [ctypes.c_void_p, *([ctypes.c_uint] * 6), ctypes.c_uint, ctypes.c_void_p,
                       ctypes.c_void_p, ctypes.c_void_p]
        fn.restype = ctypes.c_int
        _LAUNCH = fn
    return _LAUNCH


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


# C type spelling -> struct code (native sizes, no implicit alignment: offsets are laid out by hand).
_STRUCT_CODES: dict[str, str] = {
    "bool": "?", "signed char": "b", "unsigned char": "B", "int8_t": "b", "uint8_t": "B",
    "short": "h", "unsigned short": "H", "int16_t": "h", "uint16_t": "H",
    "int": "i", "signed": "i", "signed int": "i", "unsigned": "I", "unsigned int": "I", "int32_t": "i",
    "uint32_t": "I", "long": "q", "long int": "q", "unsigned long": "Q", "long long": "q", "long long int": "q",
    "unsigned long long": "Q", "unsigned long long int": "Q", "int64_t": "q", "uint64_t": "Q",
    "size_t": "Q", "ptrdiff_t": "q", "float": "f", "double": "d", _POINTER: "Q",
}
_PLAIN_SCALARS = (int, float, bool)


class ArgLayout:
    """The packed-argument block of one kernel, built once from its signature.

    Every launch writes its arguments with one `struct.pack_into` into a persistent buffer whose
    per-parameter addresses are already in a `void*[]` array, so a call costs no ctypes object
    construction and no signature work. Arguments the fast path does not cover (ctypes values, numpy
    scalars, out-of-range integers) make `pack` return False and the caller packs them the slow way,
    with exactly the old semantics.
    """

    def __init__(self, param_types: Sequence[str]) -> None:
        fmt, offsets, pos = "=", [], 0
        for kind in param_types:
            code = _STRUCT_CODES[kind]
            size = struct.calcsize("=" + code)
            pad = (-pos) % size
            fmt += "x" * pad
            pos += pad
            offsets.append(pos)
            fmt += code
            pos += size
        self.nargs = len(param_types)
        self.pointer_index = tuple(i for i, kind in enumerate(param_types) if kind == _POINTER)
        self.scalar_index = tuple(i for i, kind in enumerate(param_types) if kind != _POINTER)
        self.struct = struct.Struct(fmt)
        self.offsets = tuple(offsets)
        # A pool of (buffer, void*[] into it). A launch takes one with list.pop(), which is atomic, and
        # puts it back after cuLaunchKernel has copied the arguments: concurrent launches from several
        # threads each get their own block, without a lock (and without importing threading, which the
        # integrity checks flag in a candidate that inlines this helper).
        self.pool: list[tuple[Any, Any]] = [self.new_block()]

    def new_block(self) -> tuple[Any, Any]:
        buffer = ctypes.create_string_buffer(max(self.struct.size, 1))
        base = ctypes.addressof(buffer)
        return buffer, (ctypes.c_void_p * max(self.nargs, 1))(*[base + off for off in self.offsets])

    @staticmethod
    def for_types(param_types: Sequence[str] | None) -> ArgLayout | None:
        if param_types is None or any(kind not in _STRUCT_CODES for kind in param_types):
            return None
        return ArgLayout(param_types)

    def values(self, args: Sequence[Any], name: str) -> list[Any] | None:
        """Raw values to pack (tensor -> device pointer), or None when the slow path must pack."""
        if len(args) != self.nargs:
            return None
        out = list(args)
        tensor = torch.Tensor
        for i in self.pointer_index:
            arg = out[i]
            if isinstance(arg, tensor):
                if not arg.is_cuda:
                    raise NvrtcError(f"{name}: argument {i} is a {arg.device} tensor; kernels need CUDA tensors")
                out[i] = arg.data_ptr()
            elif type(arg) is not int:
                return None
        plain = _PLAIN_SCALARS
        for i in self.scalar_index:
            if type(out[i]) not in plain:
                return None
        return out

    def take(self) -> tuple[Any, Any]:
        try:
            return self.pool.pop()
        except IndexError:
            return self.new_block()

    def pack(self, block: tuple[Any, Any], values: Sequence[Any]) -> bool:
        """Write `values` into `block`'s buffer; False if one does not fit its C type (slow path then)."""
        try:
            self.struct.pack_into(block[0], 0, *values)
        except struct.error:
            return False
        return True


_DIMS_CACHE: dict[Any, tuple[int, int, int]] = {}


def _dims_cached(dims: Any, what: str) -> tuple[int, int, int]:
    try:
        return _DIMS_CACHE[dims]
    except (KeyError, TypeError):  # TypeError: unhashable (a list)
        pass
    value = _dims(dims, what)
    if isinstance(dims, (tuple, int)) and all(type(d) is int for d in (dims if isinstance(dims, tuple) else (dims,))):
        if len(_DIMS_CACHE) > 4096:
            _DIMS_CACHE.clear()
        _DIMS_CACHE[dims] = value
    return value


def _raw_stream_getter() -> Any:
    """A cheap `() -> cudaStream_t` for PyTorch's current stream on the current device."""
    get_raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    get_device = getattr(torch._C, "_cuda_getDevice", None)
    if get_raw is not None and get_device is not None:
        return lambda: get_raw(get_device())
    return lambda: torch.cuda.current_stream().cuda_stream


_CURRENT_RAW_STREAM: Any = None


@dataclass
class Kernel:
    """A loaded CUDA kernel; call it like `kernel(grid=(g,), block=(b,), args=(...), shared_mem=0)`."""

    name: str
    function: ctypes.c_void_p
    module: ctypes.c_void_p
    param_types: list[str] | None
    _shared_configured: int = 0
    layout: ArgLayout | None = None

    def __post_init__(self) -> None:
        if self.layout is None:
            self.layout = ArgLayout.for_types(self.param_types)

    def __call__(
        self,
        grid: Sequence[int] = (1,),
        block: Sequence[int] = (1,),
        args: Sequence[Any] = (),
        shared_mem: int = 0,
        stream: torch.cuda.Stream | None = None,
    ) -> None:
        global _CURRENT_RAW_STREAM
        g = _dims_cached(grid, "grid")
        b = _dims_cached(block, "block")
        if shared_mem >= 48 * 1024 and shared_mem > self._shared_configured:
            _check(
                _driver().cuFuncSetAttribute(self.function, _MAX_DYNAMIC_SHARED, int(shared_mem)),
                f"raising dynamic shared memory of {self.name} to {shared_mem} bytes",
            )
            self._shared_configured = int(shared_mem)
        if stream is None:
            if _CURRENT_RAW_STREAM is None:
                _CURRENT_RAW_STREAM = _raw_stream_getter()
            raw_stream = _CURRENT_RAW_STREAM()
        else:
            raw_stream = stream.cuda_stream
        layout = self.layout
        values = layout.values(args, self.name) if layout is not None else None
        if values is not None and layout is not None:
            block = layout.take()
            try:
                if layout.pack(block, values):
                    _check(_launch()(self.function, *g, *b, int(shared_mem), raw_stream, block[1], None),
                           f"launching {self.name}")
                    LAUNCH_COUNTS[self.name] = LAUNCH_COUNTS.get(self.name, 0) + 1
                    return
            finally:
                layout.pool.append(block)
        packed = self._pack(args)
        pointers = (ctypes.c_void_p * max(len(packed), 1))(
            *[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in packed])
        _check(_launch()(self.function, *g, *b, int(shared_mem), raw_stream, pointers, None),
               f"launching {self.name}")
        LAUNCH_COUNTS[self.name] = LAUNCH_COUNTS.get(self.name, 0) + 1

    def _pack(self, args: Sequence[Any]) -> list[Any]:
        """The general (slow) path: one ctypes object per argument, by its declared C type."""
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
    # No lock: a concurrent compile of the same kernel only duplicates work (cache writes are atomic).
    binary, mangled = _compile(source, name, tuple(options), f"{major}{minor}")
    module, functions = load_module(binary, [mangled], index, f"module of {name}")
    return Kernel(name=name.split("<", 1)[0], function=functions[mangled], module=module,
                  param_types=parse_signature(source, name))


def load_module(binary: bytes, names: Sequence[str], device: int, what: str) \
        -> tuple[ctypes.c_void_p, dict[str, ctypes.c_void_p]]:
    """Load a compiled module on `device`'s primary context and find each of `names` (mangled, or extern "C")
    in it: (the module, name -> function). `what` names the module in errors."""
    torch.cuda.init()
    functions: dict[str, ctypes.c_void_p] = {}
    with torch.cuda.device(device):
        torch.zeros(1, device=f"cuda:{device}")  # make sure the primary context is current
        module = ctypes.c_void_p()
        _check(_driver().cuModuleLoadData(ctypes.byref(module), binary), f"loading {what}")
        for name in names:
            function = ctypes.c_void_p()
            _check(_driver().cuModuleGetFunction(ctypes.byref(function), module, name.encode()),
                   f"finding {name} in {what}")
            functions[name] = function
    return module, functions
