"""Device memory inside the worker: the task's footprint, whether it fits, peaks, the cap, OOM messages.

One place for the memory rules of DESIGN.md: an evaluation's peak stays within 1.25x the reference's
own peak (+ 1 GiB of slack for the L2-flush buffer, compare slices and the like): the reference's
outputs wait in (pinned) host memory and are compared in device-sized slices, input mutation is
checked against a host snapshot, so one input set and one output set are alive on the device at a
time. A task that cannot fit (1.25 x its footprint + 1 GiB above the card's free memory, or, under a
cap, its footprint + TIGHT_SLACK_BYTES above the cap) is said once, before any candidate is built; an out-of-memory error is the `oom` outcome naming the side (reference, inputs, candidate),
the bytes asked, the bytes in use and the card's total. Imports torch lazily (the parent's
footprint check runs this module in a subprocess).
"""

from __future__ import annotations

import contextlib
import gc
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from cudaforge.engine.results import Memory, from_dict

if TYPE_CHECKING:
    from cudaforge.engine.worker.job import EvalJob

GIB = 1 << 30
SLACK_BYTES = GIB  # the L2 flush buffer, CUDA/cuBLAS workspaces, compare chunks
FACTOR = 1.25  # evaluation peak <= FACTOR x reference peak + SLACK_BYTES
# Under a cap the evaluation fits wherever the reference alone fits: its footprint plus the compare
# slices' temporaries (observe.CHUNK_ELEMENTS fp32 elements, a few at a time) and the L2 flush buffer.
TIGHT_SLACK_BYTES = GIB // 2
CONTEXT_GUESS_BYTES = 600 << 20  # a CUDA context's own device memory where NVML cannot say
# The temporaries of one slice of a whole-tensor pass (compare, fixed-value probe, cache-probe match):
# about 20 bytes per element of an observe.CHUNK_ELEMENTS slice, whatever the tensor's size.
SLICE_TEMP_BYTES = 32 << 20

# Which side is allocating right now: named in an out-of-memory message.
_SIDE: list[str] = ["harness"]
# What the reference's own call moved (bytes of inputs and outputs), measured once per evaluation.
REFERENCE_IO: dict[str, int] = {}


@contextlib.contextmanager
def side(name: str) -> Iterator[None]:
    """Mark allocations inside the block as `name`'s (reference, inputs, candidate)."""
    _SIDE.append(name)
    try:
        yield
    except BaseException as exc:
        if is_oom(exc) and not _OOM_SIDE:  # the innermost side the error passed through
            _OOM_SIDE.append(name)
        raise
    finally:
        _SIDE.pop()


_OOM_SIDE: list[str] = []


def current_side() -> str:
    """The side allocating now, or the side an out-of-memory error came from once it has unwound."""
    return _OOM_SIDE[0] if _OOM_SIDE and _SIDE[-1] == "harness" else _SIDE[-1]


def fmt_gib(n: float | int | None) -> str:
    return "?" if n is None else f"{n / GIB:.1f} GiB"


def is_oom(exc: BaseException) -> bool:
    return type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower()


_ASKED = re.compile(r"Tried to allocate ([\d.]+) (B|KiB|MiB|GiB|TiB)")
_CARD_FREE = re.compile(r"of which ([\d.]+) (B|KiB|MiB|GiB|TiB) is free")
_UNALLOCATED = re.compile(r"([\d.]+) (B|KiB|MiB|GiB|TiB) is reserved by PyTorch but unallocated")
_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def _bytes_named(pattern: re.Pattern[str], text: str) -> int | None:
    m = pattern.search(text)
    return int(float(m.group(1)) * _UNITS[m.group(2)]) if m else None


def asked_bytes(text: str) -> int | None:
    """The allocation size PyTorch's OOM message names (None when it names none)."""
    return _bytes_named(_ASKED, text)


def oom_limit(text: str, asked: int | None, cap_allocator_bytes: int | None) -> str:
    """Which limit an out-of-memory error met, from the figures PyTorch's message gives: the card (its free
    memory below the request: other processes, or ours past their reservations), or the cap's allocator
    limit, with how much of it sat reserved but unallocated (fragmentation the allocator could not give
    back). "" where the message names neither."""
    free = _bytes_named(_CARD_FREE, text)
    unallocated = _bytes_named(_UNALLOCATED, text)
    parts = []
    if free is not None and asked is not None and free < asked:
        parts.append(f"the card had {fmt_gib(free)} free")
    elif cap_allocator_bytes:
        parts.append(f"the cap's allocator limit {fmt_gib(cap_allocator_bytes)}"
                     + (f" (card free {fmt_gib(free)})" if free is not None else ""))
    if unallocated:
        parts.append(f"{fmt_gib(unallocated)} reserved but unallocated")
    return "; ".join(parts)


def card_total() -> int | None:
    """The card's total memory in bytes (None off CUDA)."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    with contextlib.suppress(Exception):
        return int(torch.cuda.mem_get_info()[1])
    return None


def oom_message(exc: BaseException, where: str, side_name: str | None = None) -> str:
    """'out of memory on the <side> side during <where>: asked X, Y in use of Z' (one line)."""
    import torch

    side_name = side_name or current_side()
    asked = asked_bytes(str(exc))
    in_use = None
    with contextlib.suppress(Exception):
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            in_use = int(torch.cuda.memory_allocated())
    total = card_total()
    cap = CAP.get("bytes")
    text = (f"out of memory on the {side_name} side during {where}: asked {fmt_gib(asked)}, "
            f"{fmt_gib(in_use)} in use, card total {fmt_gib(total)}")
    if cap:
        text += f", cap {fmt_gib(cap)} ([run] gpu_memory_gb)"
    limit = oom_limit(str(exc), asked, CAP.get("allocator_bytes"))
    return f"{text}: {limit}" if limit else text


def oom_evidence(exc: BaseException) -> dict[str, Any]:
    import torch

    data: dict[str, Any] = {"side": current_side(), "asked_bytes": asked_bytes(str(exc)), "total_bytes": card_total()}
    with contextlib.suppress(Exception):
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            data["in_use_bytes"] = int(torch.cuda.memory_allocated())
    return data


# ------------------------------------------------------------------ the cap ([run] gpu_memory_gb)

CAP: dict[str, Any] = {}


def cap_bytes(gpu_memory_gb: float | None) -> int | None:
    """`[run] gpu_memory_gb` in bytes (GiB, as PyTorch counts); None when no cap is set."""
    return int(float(gpu_memory_gb) * GIB) if gpu_memory_gb else None


def process_device_bytes(device: Any) -> int | None:
    """This process's device memory as NVML (and nvidia-smi) report it: the CUDA context, cuBLAS/cuDNN
    handles and modules besides what PyTorch's allocator reserves. None where NVML cannot say."""
    from cudaforge.engine.gpu import nvml

    return nvml.process_bytes(int(getattr(device, "index", None) or 0))


def outside_allocator_bytes(device: Any) -> int:
    """Device memory of this process that PyTorch's allocator does not hold (the context and the like):
    NVML's figure minus the allocator's reservation, else CONTEXT_GUESS_BYTES."""
    import torch

    used = process_device_bytes(device)
    if used is None:
        return CONTEXT_GUESS_BYTES
    return max(0, used - int(torch.cuda.memory_reserved(device)))


def apply_cap(job: EvalJob, device: Any) -> str:
    """Cap this process's device memory to `gpu_memory_gb`, the CUDA context included: PyTorch's
    per-process fraction bounds only its allocator, so the fraction is the cap less what the process
    holds outside the allocator (measured with NVML once the context exists, else a context's usual size).

    The cap is CUDA-only: on the CPU device it is ignored, and the returned note says so."""
    gb = job.gpu_memory_gb
    if not gb:
        return ""
    if getattr(device, "type", "cpu") != "cuda":
        return f"gpu_memory_gb = {gb:g} ignored: the cap is CUDA-only (PyTorch's per-process memory fraction)"
    import torch

    total = int(torch.cuda.mem_get_info(device)[1])
    cap = min(cap_bytes(gb) or total, total)
    outside = outside_allocator_bytes(device)
    allocator = max(cap - outside, GIB // 4)
    torch.cuda.set_per_process_memory_fraction(allocator / total, device)
    CAP.update(bytes=cap, outside_bytes=outside, allocator_bytes=allocator)
    return ""


def rule_allocator_bytes() -> int | None:
    """The memory rule's bound on PyTorch's allocator once the reference's own peak is measured (FACTOR x
    that peak + SLACK_BYTES), under the cap's allocator limit; None before."""
    ref = REFERENCE_IO.get("peak_bytes")
    if not ref:
        return None
    bound = int(FACTOR * ref) + SLACK_BYTES
    limit = CAP.get("allocator_bytes")
    return min(bound, int(limit)) if limit else bound


@contextlib.contextmanager
def allocator_bound(device: Any, nbytes: int | None) -> Iterator[None]:
    """Within: PyTorch's allocator may hold at most `nbytes` of the device (its per-process fraction), so
    cuDNN, whose algorithm search skips a plan whose workspace cannot be allocated, picks one that fits; the
    fraction in force before (the cap's, else the whole card) comes back on leaving. CUDA only."""
    if getattr(device, "type", "cpu") != "cuda" or not nbytes:
        yield
        return
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()  # the fraction wants one
    total = int(torch.cuda.mem_get_info(index)[1])
    before = int(CAP.get("allocator_bytes") or total)
    torch.cuda.set_per_process_memory_fraction(min(int(nbytes), before) / total, index)
    try:
        yield
    finally:
        torch.cuda.set_per_process_memory_fraction(before / total, index)


# ------------------------------------------------------------------ footprint and fit


def tensor_bytes(values: Any) -> int:
    """Bytes of every tensor in a (nested) list/tuple/dict of values."""
    import torch

    if isinstance(values, torch.Tensor):
        return values.numel() * values.element_size()
    if isinstance(values, (list, tuple)):
        return sum(tensor_bytes(v) for v in values)
    if isinstance(values, dict):
        return sum(tensor_bytes(v) for v in values.values())
    return 0


def _with_dtype(t: Any, float_dtype: Any) -> Any:
    if float_dtype is not None and t.is_floating_point():
        return t.to(float_dtype)
    return t


def _meta_inputs(task: Any, seed: int, float_dtype: Any) -> list[Any]:
    """get_inputs() drawn on the meta device at `float_dtype` (no memory): what the meta-device counts run on."""
    import torch

    torch.manual_seed(seed)
    with torch.device("meta"):
        inputs = task.get_inputs()
        if not isinstance(inputs, (list, tuple)):  # check_task's host draw names the task's error
            raise TypeError(f"get_inputs() returned {type(inputs).__name__}")
        return [_with_dtype(x, float_dtype) if isinstance(x, torch.Tensor) else x for x in inputs]


def meta_footprint(task: Any, init: list[Any], seed: int, float_dtype: Any = None) -> dict[str, Any]:
    """Inputs + outputs + parameters of the task on the meta device (no memory, no compute).

    Returns bytes per part and `reason` (empty when complete): a task that cannot run on the meta
    device (calls `.item()`, data-dependent shapes) still gets its inputs and parameters counted."""
    import torch

    out: dict[str, Any] = {"input_bytes": 0, "output_bytes": 0, "param_bytes": 0, "reason": ""}
    inputs = _meta_inputs(task, seed, float_dtype)
    out["input_bytes"] = tensor_bytes(inputs)
    try:
        with torch.device("meta"):
            model = task.Model(*init)
    except Exception as exc:  # e.g. `.item()` in __init__: count the parameters of a real (host) build
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        out["reason"] = f"Model(*get_init_inputs()) cannot be built on the meta device ({type(exc).__name__}: {first})"
        torch.manual_seed(seed)
        model = task.Model(*init)
    if float_dtype is not None:
        model = model.to(float_dtype)
    out["param_bytes"] = sum(tensor_bytes(p) for p in model.parameters()) + sum(tensor_bytes(b) for b in model.buffers())
    if out["reason"]:
        out["footprint_bytes"] = out["input_bytes"] + out["param_bytes"]
        return out
    forward = MetaPeak()
    try:
        with torch.no_grad(), torch.device("meta"), _fast_meta_rnns(), forward:
            result = model(*inputs)
        out["output_bytes"] = tensor_bytes(result)
        out["forward_peak_bytes"] = max(forward.top, out["output_bytes"])
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        out["reason"] = f"the forward pass cannot run on the meta device ({type(exc).__name__}: {first})"
    # The reference's own peak (its inputs, its forward's tensors at most, its parameters) and the
    # candidate's copy of the parameters (a ModelNew keeps the reference's, copied in by name).
    out["footprint_bytes"] = out["input_bytes"] + max(out["output_bytes"], out.get("forward_peak_bytes", 0)) + \
        2 * out["param_bytes"]
    return out


def op_results_to(note: Callable[[Any], None]) -> Any:
    """A TorchDispatchMode (not yet entered) that hands every aten op's result to `note`: how MetaPeak and
    CpuAccounting see each tensor made, factories and extension calls included."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            result = func(*args, **(kwargs or {}))
            note(result)
            return result

    return _Mode()


class MetaPeak:
    """The most bytes a forward pass on the meta device holds at once in tensors it made: every aten op's
    outputs are counted once per storage until the last tensor on it dies (as CpuAccounting does for the
    CPU device). Attention scores, conv activations and other intermediates show here, which outputs
    alone miss (level3/31_VisionAttention: 16 GiB of scores for a 16 MiB output). Library workspaces
    (cuBLAS, cuDNN) do not: the rule's slack holds them."""

    def __init__(self) -> None:
        self.alive: dict[int, list[int]] = {}
        self.current = self.top = 0
        self._mode: Any = None

    def __enter__(self) -> MetaPeak:
        self._mode = op_results_to(self.note)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)

    def note(self, value: Any) -> None:
        import weakref

        import torch

        if isinstance(value, (list, tuple)):
            for v in value:
                self.note(v)
            return
        if not isinstance(value, torch.Tensor):
            return
        try:
            storage = value.untyped_storage()
            key, nbytes = storage._cdata, storage.nbytes()
        except (RuntimeError, AttributeError, NotImplementedError):
            return
        entry = self.alive.get(key)
        if entry is None:
            entry = self.alive[key] = [nbytes, 0]
            self.current += nbytes
            self.top = max(self.top, self.current)
        entry[1] += 1
        weakref.finalize(value, self._drop, key)

    def _drop(self, key: int) -> None:
        entry = self.alive.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del self.alive[key]
            self.current -= entry[0]


@contextlib.contextmanager
def _fast_meta_rnns() -> Iterator[None]:
    """nn.LSTM/GRU/RNN on the meta device decompose step by step (30+ s for KernelBench's LSTMs); their
    output shapes follow from the module's settings, so answer with those."""
    import torch
    from torch import nn

    def forward(self: Any, x: Any, hx: Any = None) -> Any:
        batched = x.dim() == 3
        seq, batch = (x.shape[0], x.shape[1]) if batched and not self.batch_first else \
            ((x.shape[1], x.shape[0]) if batched else (x.shape[0], 1))
        d = 2 if self.bidirectional else 1
        out_size = self.proj_size if getattr(self, "proj_size", 0) else self.hidden_size
        if not batched:
            out = torch.empty(seq, d * out_size, dtype=x.dtype)
        elif self.batch_first:
            out = torch.empty(batch, seq, d * out_size, dtype=x.dtype)
        else:
            out = torch.empty(seq, batch, d * out_size, dtype=x.dtype)
        lead = (d * self.num_layers, batch) if batched else (d * self.num_layers,)
        h = torch.empty(*lead, out_size, dtype=x.dtype)
        if isinstance(self, nn.LSTM):
            return out, (h, torch.empty(*lead, self.hidden_size, dtype=x.dtype))
        return out, h

    saved = {cls: cls.forward for cls in (nn.LSTM, nn.GRU, nn.RNN)}
    try:
        for cls in saved:
            cls.forward = forward  # type: ignore[method-assign]
        yield
    finally:
        for cls, fn in saved.items():
            cls.forward = fn  # type: ignore[method-assign]


def needed_bytes(footprint: int) -> int:
    """What an evaluation needs with room to spare: FACTOR x footprint + SLACK_BYTES."""
    return int(FACTOR * footprint) + SLACK_BYTES


def estimate_bytes(footprint: int, cap: int | None) -> int:
    """The evaluation's expected peak: needed_bytes, or under a cap it does not leave room for, the tight
    figure (the reference's outputs and input snapshots on the host, the slices beside the footprint)."""
    need = needed_bytes(footprint)
    return need if cap is None or need <= cap else tight_bytes(footprint)


def tight_bytes(footprint: int) -> int:
    """The least an evaluation needs under a cap, which holds the CUDA context too: the footprint +
    TIGHT_SLACK_BYTES + a context's usual size."""
    return footprint + TIGHT_SLACK_BYTES + CONTEXT_GUESS_BYTES


def host_needed_bytes(input_bytes: int, output_bytes: int) -> int:
    """Host memory an evaluation holds beside the task's own: the copies that stand in for a second set on
    the device. Until timing, one output at a time (the side that ran first waits there; the outputs of a
    previous call are fingerprints) and one input set: a cache probe's next draw where it does not fit
    beside the probed one and cannot be the probed one flipped in place (an input that is not floating
    point), or a snapshot for a reference that changes its inputs in place, or a new-memory draw that landed
    on the old addresses. Both of the first two at once (rare) need a second input set: the cache probes
    ask for it then (`host_input_room`). The correctness trials copy no inputs at all (fingerprints, and
    draws made again). During timing, no inputs and the timed check's two expected outputs (one per input
    content the timed calls rotate over: integrity/runtime.py TimedOutputCheck.prepare). On the H200 sweep
    the old estimate (two input sets always) held 18 GiB for each 6 GiB elementwise problem that used 12,
    and such problems waited for host memory 311 s in all (session 13)."""
    return max(input_bytes + output_bytes, 2 * output_bytes)


def host_available_bytes() -> int | None:
    """Host memory available now (psutil; None where it is not installed)."""
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.virtual_memory().available)


HOST_RESERVE_MIN_BYTES = GIB  # host estimates under this are not reserved (the ledger stays short)


def host_budget(lock_path: str) -> Callable[[], int]:
    """The host bytes our evaluations may reserve together (gpu_share.reserve_host): what is available now,
    plus what our other reserving evaluations hold now of what they reserved (their private resident
    memory, at most their reservation), since their reservations are counted instead."""
    import os

    from cudaforge.engine.gpu.ledger import live_entries

    def budget() -> int:
        others = [e for e in live_entries(f"{lock_path}.host") if e.pid != os.getpid()]
        return int(host_available_bytes() or 0) + sum(min(e.nbytes, anon_resident_bytes(e.pid)) for e in others)

    return budget


def anon_resident_bytes(pid: int) -> int:
    """A process's private resident memory (RssAnon: its tensors, page-locked ones included, and heap);
    0 where /proc cannot say."""
    with contextlib.suppress(OSError, ValueError, IndexError), \
            open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def host_message(task_name: str, need: int, available: int) -> str:
    """The one line said when the host is short of memory for the reference's outputs and input snapshots."""
    return (f"{task_name} needs about {need / GIB:.1f} GiB of host memory to evaluate (its inputs and outputs, "
            f"kept on the host); the host has {fmt_gib(available)} available")


def fit_message(task_name: str, footprint: int, available: int, cap: int | None) -> str:
    """The one line said when a task cannot fit: names the need and what the card (or cap) has."""
    need = needed_bytes(footprint)
    where = (f"the cap ([run] gpu_memory_gb) is {fmt_gib(cap)}" if cap is not None and cap <= available
             else f"this card has {fmt_gib(available)} free")
    return (f"{task_name} needs about {need / GIB:.0f} GiB to evaluate ({FACTOR:g} × {footprint / GIB:.1f} GiB + "
            f"{SLACK_BYTES / GIB:.0f} GiB; at least {tight_bytes(footprint) / GIB:.1f} GiB under a cap); {where}")


def fits(footprint: int, free: int, cap: int | None) -> bool:
    """With room to spare (needed_bytes) within the free memory, or under a cap at least tight_bytes."""
    limit = free if cap is None else min(free, cap)
    if needed_bytes(footprint) <= limit:
        return True
    return cap is not None and tight_bytes(footprint) <= limit


# ------------------------------------------------------------------ peaks


ACCOUNTING_ENV = "CUDAFORGE_CPU_MEMORY_ACCOUNTING"  # "1": count the CPU device's tensor bytes (tests, benches)


class CpuAccounting:
    """Tensor bytes alive in this process on the CPU device, where PyTorch keeps no allocator statistics:
    a TorchDispatchMode sees every tensor an aten op returns (factories, the models' parameters, the
    candidate's extension calls included, since they go through the dispatcher) and counts its storage
    once; a storage is uncounted when the last tensor seen on it dies (weakref finalizers: a tensor
    PyTorch still holds in C++ keeps its Python object, so it is not uncounted early). Opt-in
    (ACCOUNTING_ENV): a Python hook on every op slows the CPU device's calls."""

    def __init__(self) -> None:
        self.alive: dict[int, list[int]] = {}  # storage pointer -> [bytes, tensors seen on it and alive, host]
        self.current = 0
        self.top = 0
        self.host_current = 0  # what host_copy made: on a GPU that is host memory, so it is counted apart
        self.host_top = 0
        self.host_side = False
        self.mode: Any = None
        self._serial = 0

    @contextlib.contextmanager
    def on_host(self) -> Iterator[None]:
        """Tensors made inside the block are the host's (host_copy's copies on the CPU device)."""
        self.host_side, saved = True, self.host_side
        try:
            yield
        finally:
            self.host_side = saved

    def start(self) -> None:
        self.mode = op_results_to(self.note)
        self.mode.__enter__()

    def stop(self) -> None:
        if self.mode is not None:
            self.mode.__exit__(None, None, None)
            self.mode = None

    def note(self, out: Any) -> None:
        import weakref

        import torch

        if isinstance(out, (list, tuple)):
            for o in out:
                self.note(o)
            return
        if not isinstance(out, torch.Tensor) or out.device.type != "cpu":
            return
        with contextlib.suppress(RuntimeError):  # tensors without storage (sparse, some wrappers)
            storage = out.untyped_storage()
            ptr, nbytes = storage.data_ptr(), storage.nbytes()
            if nbytes == 0:
                return
            entry = self.alive.get(ptr)
            if entry is None:
                owner = self._within(ptr, nbytes)
                if owner is not None:  # a second storage over counted memory (a DLPack re-wrap): its owner's
                    ptr, entry = owner, self.alive[owner]
            if entry is None:
                self._serial += 1  # which allocation at this address: a finalizer of an earlier one is ignored
                entry = self.alive[ptr] = [nbytes, 0, int(self.host_side), self._serial]
                if self.host_side:
                    self.host_current += nbytes
                    self.host_top = max(self.host_top, self.host_current)
                else:
                    self.current += nbytes
                    self.top = max(self.top, self.current)
            entry[1] += 1
            weakref.finalize(out, self._drop, ptr, entry[3])

    def _within(self, ptr: int, nbytes: int) -> int | None:
        """The counted allocation that holds [ptr, ptr + nbytes), if any."""
        for start, (size, *_) in self.alive.items():
            if start <= ptr and ptr + nbytes <= start + size:
                return start
        return None

    def _drop(self, ptr: int, serial: int) -> None:
        entry = self.alive.get(ptr)
        if entry is None or entry[3] != serial:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            self.forget(ptr)

    def forget(self, ptr: int) -> None:
        """Uncount the allocation at `ptr` now: its storage was let go while a tensor seen on it lives on
        over other memory (`p.data = t`, shared_weights.py), whose finalizer will then find nothing."""
        entry = self.alive.pop(ptr, None)
        if entry is None:
            return
        if entry[2]:
            self.host_current -= entry[0]
        else:
            self.current -= entry[0]


CPU_ACCOUNTING = CpuAccounting()


def storage_let_go(storage: Any) -> None:
    """Where `storage` (a handle the caller took before rebinding the tensors on it) is held by nothing but
    that handle, it is freed with it: the CPU device's accounting uncounts it now (a GPU's allocator needs
    no telling)."""
    if CPU_ACCOUNTING.mode is None or storage.device.type != "cpu":
        return
    from cudaforge.engine.worker.host_buffers import storage_holders

    if storage_holders(storage) == 1:
        CPU_ACCOUNTING.forget(storage.data_ptr())


def start_accounting(device: Any) -> None:
    """Count the CPU device's tensor bytes for this evaluation when ACCOUNTING_ENV asks for it."""
    import os

    if getattr(device, "type", "cpu") == "cpu" and os.environ.get(ACCOUNTING_ENV) == "1":
        CPU_ACCOUNTING.start()


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_initialized())


def reset_peak() -> None:
    import torch

    if _cuda():
        torch.cuda.reset_peak_memory_stats()
    elif CPU_ACCOUNTING.mode is not None:
        CPU_ACCOUNTING.top = CPU_ACCOUNTING.current


PHASE_PEAKS: dict[str, int] = {}  # each phase's own peak (bytes): which step of the evaluation set its peak


def note_phase_peak(ended: str) -> None:
    """At a phase's end (harness.PHASE_END_HOOKS): its peak is kept, the evaluation's too, and the next
    phase starts from what is allocated now."""
    top = peak()
    if top is None:
        return
    if ended != "done":
        PHASE_PEAKS[ended] = max(PHASE_PEAKS.get(ended, 0), top)
    _EVAL_PEAK[0] = max(_EVAL_PEAK[0], top)
    reset_peak()


def peak() -> int | None:
    """The allocator's peak since reset_peak (CUDA), or the CPU accounting's (None without either)."""
    import torch

    if _cuda():
        return int(torch.cuda.max_memory_allocated())
    if CPU_ACCOUNTING.mode is not None:
        return CPU_ACCOUNTING.top
    return None


LARGE_BYTES = 256 << 20  # a step whose tensors are this large gives its memory back before the next


def _moves_large() -> bool:
    """Whether the reference moves LARGE_BYTES or more (or has not been measured yet)."""
    return REFERENCE_IO.get("input_bytes", 0) + REFERENCE_IO.get("output_bytes", 0) >= LARGE_BYTES or not REFERENCE_IO


def release_if_large(within: int | None = None) -> None:
    """release() where the reference moves LARGE_BYTES or more: for small tasks the collector's pass and
    the device sync cost more than the memory they return (part of a small round's fixed cost). With
    `within`, only as release_within does."""
    if _moves_large():
        release_within(within)


def release_within(reservation: int | None) -> None:
    """Between the steps of an evaluation beside others: release() only where the allocator holds more than
    `reservation` (the bytes the ledger reserved for this evaluation: gpu_share.reserved()), else a young-
    generation collection only. The steps after the reference's call draw inputs and outputs of its sizes
    again, so a cache within the reservation is memory the next step takes back, and no other evaluation
    was promised it: giving it back unmapped GiBs in 20 MiB pieces (expandable segments) and the next step
    mapped them again, under a hold and beside seven other processes' work (a release at the end of
    correctness took up to 3.9 s on the H200 sweep, session 35). The memory rule counts allocated bytes, which
    a cache does not change. Without a reservation (one evaluation alone) it always releases."""
    import torch

    if reservation is not None and _cuda() and int(torch.cuda.memory_reserved()) <= reservation:
        gc.collect(1)  # what the step left in reference cycles, as release() would collect
        return
    release()


def between_trials() -> None:
    """What a correctness trial left in reference cycles goes (the young generations: a cycle holding an output
    would raise the next trial's allocated peak, which the memory rule measures), while the allocator keeps its
    cached device memory for the next trial, which allocates the same sizes again. Giving it back each time
    (release) and mapping it again cost up to a second per trial of a GiB-scale task: expandable segments
    unmap and map it in 20 MiB pieces (the trials' releases were 115 s of the H200 sweep's slot time,
    3.9 s of level1/100_HingeLoss's 5.1 s of correctness; session 18). The cache stays within what the trial
    itself reserved at its peak (live small tensors sit in the allocator's small pool, apart from the large
    one), the memory rule counts allocated bytes, and the cap bounds the cache too: over it, the allocator
    frees cached blocks before it fails. The step's end releases as before (release_if_large). Where release_if_large
    would have released only (CUDA, a large task): a small round pays for no collector's pass."""
    if _cuda() and _moves_large():
        gc.collect(1)


def release(full: bool = False, host_buffers: bool = True) -> None:
    """Give cached device memory back to the driver: called between steps that hold large tensors and
    (`full`: every generation collected, and with `host_buffers` the page-locked host buffers trimmed)
    before the worker lets the GPU lock go (the next evaluation must find the card free)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():  # host memory is freed by refcounts
        # The young generations only: what a step left in reference cycles is young. A full collection
        # walks every object torch's import made (0.1-0.2 s each time: most of a small round's checks).
        gc.collect() if full else gc.collect(1)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        if full and host_buffers:
            from cudaforge.engine.worker.host_buffers import POOL

            POOL.trim()


def held_bytes() -> int:
    """Device memory this process's allocator still reserves (0 off CUDA)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return int(torch.cuda.memory_reserved())
    return 0


# ------------------------------------------------------------------ host copies


# Larger host copies do not use PyTorch's pinned allocator: it rounds each block up to a power of two and
# keeps freed blocks, so the 6 GiB copies of a large elementwise task held 8 GiB each for the worker's
# life, and two such evaluations side by side ran the 128 GiB GPU machine out of host memory. They go to
# the worker's own buffers, page-locked at their exact size and reused (host_buffers.py).
PINNED_MAX_BYTES = 256 << 20


def host_copy(values: list[Any], wait: bool = True) -> list[Any]:
    """Host copies of the tensors among `values` (others as they are): on CUDA pinned up to
    PINNED_MAX_BYTES, so a compare or a restore moves them back slice by slice at full bandwidth, larger
    ones in page-locked host buffers reused from earlier copies (host_buffers.py); plain clones on the CPU
    device. What the device then holds is one set of inputs and one of outputs; the copies wait on the host.

    `wait=False` leaves the copies queued on the current stream (the caller synchronizes before it reads
    them; whatever the stream does next to the originals runs after the copies)."""
    import torch

    out: list[Any] = []
    cuda = False
    for v in values:
        if not isinstance(v, torch.Tensor):
            out.append(v)
            continue
        v = v.detach()
        if v.device.type == "cpu":
            with CPU_ACCOUNTING.on_host():
                out.append(v.clone())
            continue
        cuda = True
        h = None
        if v.numel() * v.element_size() <= PINNED_MAX_BYTES:
            with contextlib.suppress(RuntimeError):  # pinned memory is a limited resource: pageable works
                h = torch.empty_like(v, device="cpu", pin_memory=True)
        else:  # a buffer an earlier copy used, page-locked once (host_buffers.py), kept within the host estimate
            from cudaforge.engine.worker.host_buffers import POOL

            h = POOL.empty_like(v)
        if h is None:
            h = torch.empty_like(v, device="cpu")
        _copy_in_pieces(h, v, wait)
        out.append(h)
    if cuda and wait:
        torch.cuda.synchronize()
    return out


# The timed check's expected outputs (integrity/runtime.py TimedOutputCheck) stay on the device where the
# memory rule has room for them beside everything the timed calls hold, up to this much in all. Below that a
# host copy costs more than it saves: the first copy into new host memory runs at about 1.4 GB/s (page
# faults; page-locking is no faster), and the examples' rounds spent 0.13-0.15 s on their two 128 MiB
# expected outputs (H200, 2026-12-04); kept, the window's compares read both outputs on the device.
EXPECTED_ON_DEVICE_BYTES = 512 << 20


class ExpectedPlace:
    """Where the timed check's expected outputs wait for their sampled calls: as they are on the device while
    the rule has room (expected_fits) and together they stay within `limit`, else host copies (host_copy)."""

    def __init__(self, limit: int = EXPECTED_ON_DEVICE_BYTES) -> None:
        self.limit, self.kept = limit, 0

    def __call__(self, values: list[Any]) -> list[Any]:
        import torch

        tensors = [v for v in values if isinstance(v, torch.Tensor)]
        nbytes = tensor_bytes(tensors)
        on_gpu = _cuda() and all(t.device.type == "cuda" for t in tensors)
        if on_gpu and self.kept + nbytes <= self.limit and expected_fits(nbytes):
            self.kept += nbytes
            return list(values)
        # On the host, with as many of their first elements as the rule has room for kept on the device too:
        # the window's sampled compares read those there (device_heads.py).
        return _with_heads(values, host_copy(values), head_room(nbytes)) if on_gpu else host_copy(values)


def expected_fits(nbytes: int) -> bool:
    """Whether `nbytes` more may stay on the device through the timed calls within the memory rule (and the
    cap): what is allocated now (both draws, the models, the L2 flush buffer, expected outputs and device heads
    kept so far) plus what one call adds beyond its inputs (the reference's own peak less its inputs, its
    parameters counted again: an overestimate) plus these bytes, under FACTOR x the reference's peak +
    SLACK_BYTES less a quarter of the slack (library workspaces, compare slices)."""
    ref_peak = int(REFERENCE_IO.get("peak_bytes", 0))
    if ref_peak <= 0:
        return False
    return nbytes <= _room_beside(int(FACTOR * ref_peak + SLACK_BYTES - SLACK_BYTES // 4),
                                  held_allocated() + _call_adds(ref_peak))


def _call_adds(ref_peak: int) -> int:
    """What one reference call adds beyond its inputs: its own peak less its inputs (its parameters counted
    again: an overestimate)."""
    return max(0, ref_peak - int(REFERENCE_IO.get("input_bytes", 0)))


def _room_beside(bound: int, held: int) -> int:
    """Bytes that may stay on the device beside `held` under `bound` (the rule's, as the caller reads it)
    and under the cap less a quarter of the slack (library workspaces, compare slices); 0 where none."""
    room = bound - held
    cap = CAP.get("bytes")
    if cap is not None:
        room = min(room, int(cap) - SLACK_BYTES // 4 - held)
    return max(0, room)


COPY_PIECE_BYTES = 256 << 20  # a large host copy goes in pieces of this size, a step boundary between them


def _copy_in_pieces(host: Any, device_tensor: Any, wait: bool) -> None:
    """`host.copy_(device_tensor)`, a large contiguous one in pieces with a step boundary (observe.checkpoint)
    between them where the caller waits for it anyway: a 6 GiB copy held the GPU as a reader for seconds, and
    a timed window waiting elsewhere waited for all of it (on the H200 sweep of 2026-12-03 the windows' waits
    for readers summed 645 s)."""
    from cudaforge.engine import observe

    nbytes = device_tensor.numel() * device_tensor.element_size()
    same_dense_layout = host.stride() == device_tensor.stride() and observe.memory_order(host) is not None
    if not wait or nbytes <= COPY_PIECE_BYTES or not same_dense_layout:
        host.copy_(device_tensor, non_blocking=True)
        return
    src, dst = observe.flat_view(device_tensor), observe.flat_view(host)  # memory order: views, one layout
    step = max(1, COPY_PIECE_BYTES // device_tensor.element_size())
    for start in range(0, src.numel(), step):
        dst[start:start + step].copy_(src[start:start + step], non_blocking=True)
        observe.checkpoint()  # a yield syncs first: the pieces queued so far are done


# ------------------------------------------------------------------ the worker's steps


def missing_module_message(task_path: str, exc: ModuleNotFoundError) -> str:
    """One line for a task that imports a module that is not installed (exit 3, like any missing tool)."""
    name = (exc.name or str(exc)).split(".")[0]
    return f"{task_path}: the task imports `{name}`, which is not installed; install it with: pip install {name}"


def task_name(path: str) -> str:
    """'level1/39_L2Norm_' for .../level1/39_L2Norm_.py: how a task is named in memory messages."""
    from pathlib import Path

    p = Path(path)
    return f"{p.parent.name}/{p.stem}" if p.parent.name else p.stem


def check_task(job: EvalJob, task: Any, init: list[Any], device: Any, float_dtype: Any,
               mem: dict[str, Any], admit_host: Callable[[int], Any] | None = None) -> None:
    """The task's own check, before any candidate is built: get_inputs() runs (on the meta device, else
    for real on the host), the footprint is counted, and on CUDA the task must fit the card or cap.

    Raises TaskFailure for a broken task and CandidateFailure("oom") for one that cannot fit."""
    import torch
    from cudaforge.engine.worker.failures import CandidateFailure, TaskFailure

    seed = job.seed
    try:
        if job.counts is not None:
            fp = dict(job.counts.footprint)  # the app's count (fit.task_counts): the same function, once per task
        else:
            fp = meta_footprint(task, init, seed, float_dtype)
    except Exception as meta_exc:
        torch.manual_seed(seed)
        try:
            raw = task.get_inputs()
        except Exception as exc:
            raise TaskFailure(f"{job.task_path}: get_inputs() raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(raw, (list, tuple)):
            raise TaskFailure(f"{job.task_path}:{task.get_inputs.__code__.co_firstlineno}: get_inputs() must "
                              f"return a list or tuple of inputs, got {type(raw).__name__}") from None
        fp = {"input_bytes": tensor_bytes(list(raw)), "output_bytes": 0, "param_bytes": 0,
              "reason": f"get_inputs()/Model cannot run on the meta device ({type(meta_exc).__name__})"}
        fp["footprint_bytes"] = fp["input_bytes"]
        del raw
    mem.update(fp)
    mem["needed_bytes"] = needed_bytes(fp["footprint_bytes"])
    mem["host_needed_bytes"] = host_needed_bytes(fp["input_bytes"], fp["output_bytes"])
    if getattr(device, "type", "cpu") != "cuda":
        return
    from cudaforge.engine.worker.host_buffers import POOL

    POOL.budget = int(mem["host_needed_bytes"])  # host_copy's reused buffers stay within the host estimate
    POOL.pin = True  # and are page-locked: the large copies run by DMA, not staged by a CPU memcpy
    if admit_host is not None and mem["host_needed_bytes"] >= HOST_RESERVE_MIN_BYTES:
        # Beside our other evaluations, wait for the host memory they hold rather than fail for it
        # (the worker: gpu_share.reserve_host).
        admit_host(int(mem["host_needed_bytes"]))
    host_free = host_available_bytes()
    if host_free is not None and mem["host_needed_bytes"] > host_free:
        mem.update(fits=False, message=host_message(task_name(job.task_path), mem["host_needed_bytes"], host_free))
        raise CandidateFailure("oom", mem["message"])
    free, total = (int(v) for v in torch.cuda.mem_get_info(device))
    cap = CAP.get("bytes")
    if not fits(fp["footprint_bytes"], free, cap):
        # Our other evaluations free their memory before they hand the GPU lock over: count it as free
        # now, and check the card's real free memory again once this one holds the lock (recheck_fit).
        from cudaforge.engine.gpu.lock import card_share

        share = card_share(job.gpu, lambda: int(torch.cuda.mem_get_info(device)[0]))
        if share is not None:
            free = share.free_with_ours
    mem.update(free_bytes=free, total_bytes=total, cap_bytes=cap, fits=fits(fp["footprint_bytes"], free, cap),
               needed_bytes=estimate_bytes(fp["footprint_bytes"], cap))
    ESTIMATE["bytes"] = int(mem["needed_bytes"])  # device heads stay under it (head_room)
    if not mem["fits"]:
        mem["message"] = fit_message(task_name(job.task_path), fp["footprint_bytes"], free, cap)
        raise CandidateFailure("oom", mem["message"])


def recheck_fit(job: EvalJob, device: Any, mem: dict[str, Any]) -> None:
    """The fit check again under the GPU lock, against what is really free now (plus what this worker
    holds itself): before the build it counted our other evaluations' memory as free."""
    from cudaforge.engine.worker.failures import CandidateFailure

    if getattr(device, "type", "cpu") != "cuda" or "footprint_bytes" not in mem:
        return
    import torch

    free = int(torch.cuda.mem_get_info(device)[0]) + held_bytes()
    cap = CAP.get("bytes")
    if not fits(int(mem["footprint_bytes"]), free, cap):
        mem.update(free_bytes=free, fits=False,
                   message=fit_message(task_name(job.task_path), int(mem["footprint_bytes"]), free, cap))
        raise CandidateFailure("oom", mem["message"])


_EVAL_PEAK: list[int] = [0]


def measure_reference(draw: Any, run: Any, flatten: Any, mem: dict[str, Any]) -> None:
    """The reference's own peak: one call with its inputs and outputs, from PyTorch's allocator (its
    parameters counted in). Also records the bytes it moves (for the speed-of-light check)."""
    import time

    from cudaforge.engine import observe

    release()
    so_far = peak()
    if so_far is not None:
        _EVAL_PEAK[0] = max(_EVAL_PEAK[0], so_far)
    reset_peak()
    before = held_allocated()
    with side("inputs"):
        inputs = draw()
    observe.checkpoint()  # a window waiting elsewhere goes between the draw and the call (one step each)
    start = time.perf_counter()
    with side("reference"):
        outs = flatten(run(inputs))
    mem["reference_call_s"] = round(time.perf_counter() - start, 6)
    REFERENCE_IO["input_bytes"] = tensor_bytes(inputs)
    REFERENCE_IO["output_bytes"] = tensor_bytes(outs)
    top = peak()
    if top is not None:
        mem["reference_peak_bytes"] = top - before + int(mem.get("param_bytes", 0))
        REFERENCE_IO["peak_bytes"] = mem["reference_peak_bytes"]
        REFERENCE_IO["held_peak_bytes"] = top  # everything on the device at that peak: both models included
    del inputs, outs
    # No release here: the caller grows the reservation to this peak and more, then release_within decides
    # (the trials draw these sizes again).


def reservation_after_reference() -> int | None:
    """What the evaluation is expected to hold at most, once the reference's own peak is measured: the
    device's peak during that call (both models' parameters, the reference's inputs, outputs and library
    workspaces) plus the rule's room beside it ((FACTOR - 1) x that peak + SLACK_BYTES), under the cap.
    The estimate before the build counts on the meta device, which sees no cuDNN workspace and no
    temporaries of fused kernels: on the H200 sweep 27 of 250 problems peaked above it (convolutions,
    HuberLoss). None before the reference was measured."""
    top, ref = REFERENCE_IO.get("held_peak_bytes"), REFERENCE_IO.get("peak_bytes")
    if not top or not ref:
        return None
    need = int(top + (FACTOR - 1) * ref) + SLACK_BYTES
    cap = CAP.get("bytes")
    return min(need, int(cap)) if cap else need


def park(values: list[Any], beside: list[Any] = ()) -> tuple[list[Any], bool]:
    """Where the output of the side that ran first waits while the other side runs, and whether it was
    copied: kept where it is where one more set of its size fits the memory rule beside the reference's
    own peak (second_draw_fits) and it shares no memory with `beside` (the inputs, which may be drawn
    again), else a host copy (host_copy) with as many of its first elements as head_room allows kept on the
    device too, for its compare (device_heads.py). A tensor kept alive is memory no later allocation gets, so a
    candidate handing back unwritten memory cannot find it there; where it was copied, the callers poison
    the original for the same reason."""
    import torch
    from cudaforge.engine.observe import storage_addresses

    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    shares_memory = bool(storage_addresses(tensors) & storage_addresses(beside))
    if tensors and not shares_memory and second_draw_fits(tensor_bytes(tensors)):
        return list(values), False
    return _with_heads(values, host_copy(values), head_room(tensor_bytes(tensors))), True


def _with_heads(values: list[Any], copies: list[Any], room: int) -> list[Any]:
    """`copies` (host_copy's of `values`), the first elements of each device tensor among `values` kept on the
    device as well within `room` bytes (device_heads.py: their compares read them there, not over the bus)."""
    import torch
    from cudaforge.engine.worker import device_heads

    if not _cuda():
        return copies
    for v, h in zip(values, copies, strict=True):
        if room <= 0:
            break
        if isinstance(v, torch.Tensor) and v.device.type == "cuda" and isinstance(h, torch.Tensor):
            room -= device_heads.keep(v, h, room)
    return copies


# The evaluation's fit estimate (check_task's needed_bytes, what the app was told it needs): device heads
# never take the peak over it, so they add no "estimate below the peak" of their own.
ESTIMATE: dict[str, int] = {}


def head_room(parked_bytes: int) -> int:
    """The device bytes the heads of an output parked on the host may take (device_heads.py): the memory
    rule's bound (FACTOR x the reference's peak + half of SLACK_BYTES) less what stays allocated once the
    parked output is freed (inputs, a second input set beside them, models, heads kept so far) and less
    what the next call adds beyond its inputs (the reference's peak less its inputs: an overestimate);
    under the cap and the fit estimate as well, less a quarter of the slack."""
    ref_peak = int(REFERENCE_IO.get("peak_bytes", 0))
    if ref_peak <= 0 or "bytes" not in ESTIMATE:
        return 0
    return _room_beside(min(int(FACTOR * ref_peak + SLACK_BYTES // 2), ESTIMATE["bytes"] - SLACK_BYTES // 4),
                        held_allocated() - parked_bytes + _call_adds(ref_peak))


def second_draw_fits(draw_bytes: int) -> bool:
    """Whether a second set (an input draw, an output that waits) may stay on the device within the memory
    rule: the timed calls hold about the reference's own peak plus that set, which must stay under FACTOR x
    that peak + SLACK_BYTES (half the slack is left to the L2 flush buffer and the timed-output check), less
    the device heads of parked outputs already kept, and under the cap when one is set. Where a second draw
    does not fit, timing alternates one draw in place (integrity.runtime.FlippingDraw)."""
    from cudaforge.engine.worker import device_heads

    ref_peak = int(REFERENCE_IO.get("peak_bytes", 0)) or int(REFERENCE_IO.get("input_bytes", 0)) + \
        int(REFERENCE_IO.get("output_bytes", 0))
    # On a GPU half the slack may go to the draw; the CPU device has no flush buffer or library workspaces,
    # so there the slice temporaries are all the slack (the bound its accounting is held to).
    slack = SLACK_BYTES // 2 if _cuda() else SLICE_TEMP_BYTES
    room = int((FACTOR - 1) * ref_peak + slack) - device_heads.live_bytes()
    cap = CAP.get("bytes")
    if cap is not None:
        room = min(room, int(cap) - held_allocated() - ref_peak - slack)
    return draw_bytes <= max(0, room)


def held_allocated() -> int:
    import torch

    if _cuda():
        return int(torch.cuda.memory_allocated())
    return CPU_ACCOUNTING.current if CPU_ACCOUNTING.mode is not None else 0


def finish(mem: dict[str, Any]) -> Memory:
    """The report's memory record at the end (whatever the outcome): the notes the checks made in `mem`
    with the evaluation's peak and the card's total; the ratio the design bounds ((peak - 1 GiB) /
    reference peak); on CUDA the process's peak as NVML counts it (the allocator's reserved peak plus what
    lies outside the allocator), on the CPU device with accounting the bytes host_copy held. A peak that
    cannot be read leaves the notes made so far; a note Memory has no field for is dropped."""
    with contextlib.suppress(Exception):
        _note_peaks(mem)
    if _cuda():
        from cudaforge.engine.worker.device_heads import STATS

        mem["compared_on_device_bytes"] = STATS["head_bytes"]
        mem["compared_from_host_bytes"] = STATS["host_bytes"]
    return from_dict(Memory, mem)


def _note_peaks(mem: dict[str, Any]) -> None:
    import torch

    top = peak()
    if PHASE_PEAKS:
        mem["phase_peak_bytes"] = dict(PHASE_PEAKS)
    if top is not None:
        mem["eval_peak_bytes"] = max(_EVAL_PEAK[0], top)
        total = card_total()
        if total is not None:
            mem.setdefault("total_bytes", total)
        if CAP.get("bytes"):
            mem["cap_bytes"] = CAP["bytes"]
        ref = mem.get("reference_peak_bytes")
        if ref:
            mem["ratio"] = round(max(0, mem["eval_peak_bytes"] - SLACK_BYTES) / ref, 3)
    if _cuda():
        device = torch.device("cuda", torch.cuda.current_device())
        used = process_device_bytes(device)
        if used is not None:
            outside = max(0, used - int(torch.cuda.memory_reserved(device)))
            mem["process_peak_bytes"] = max(used, int(torch.cuda.max_memory_reserved(device)) + outside)
    elif CPU_ACCOUNTING.mode is not None:
        mem["host_peak_bytes"] = CPU_ACCOUNTING.host_top
        CPU_ACCOUNTING.stop()


# ------------------------------------------------------------------ the parent's check, in a subprocess


def meta_work(task: Any, init: list[Any], seed: int, float_dtype: Any = None) -> dict[str, Any] | None:
    """The reference call's bytes and FLOPs (speed_of_light.count_work) as the worker counts them, on the
    model and inputs built on the meta device at `float_dtype`; None where either cannot be built there (the
    worker counts on its real ones then). JSON-ready (results.to_dict of a SpeedOfLight)."""
    import torch
    from cudaforge.engine import speed_of_light
    from cudaforge.engine.results import to_dict

    try:
        inputs = _meta_inputs(task, seed, float_dtype)
        with torch.device("meta"):
            model = task.Model(*init)
        if float_dtype is not None:
            model = model.to(float_dtype)
        work = speed_of_light.count_work(model, inputs, quiet_meta=_fast_meta_rnns())
    except Exception:  # the footprint is what the fit check needs: the worker counts the work itself then
        return None
    return to_dict(work) if work.flops is not None else None


def count_task(path: str, seed: int, precision: str) -> dict[str, Any]:
    """A task's meta footprint with the reference call's work under "work" (meta_work; no device memory,
    no CUDA context), or {"error": ..., "kind": ...} for a task that cannot load."""
    import importlib.util

    import torch

    float_dtype = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    try:
        spec = importlib.util.spec_from_file_location("cudaforge_task", path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        init = list(module.get_init_inputs())
        fp = meta_footprint(module, init, seed, float_dtype)
        fp["work"] = meta_work(module, init, seed, float_dtype)
    except ModuleNotFoundError as exc:
        return {"error": missing_module_message(path, exc), "kind": "unavailable"}
    except Exception as exc:  # the worker says it properly (task_error); the fit check just cannot tell
        return {"error": f"{type(exc).__name__}: {exc}"[:300], "kind": "unknown"}
    return fp


def footprint_main(argv: list[str]) -> int:
    """`python -m cudaforge.engine.worker.memory TASK SEED PRECISION`: count_task as one JSON line. The parent
    (engine/evaluation/fit.py) compares it with the card and hands both to the workers (TaskCounts).

    `python -m cudaforge.engine.worker.memory --stream SEED PRECISION`: one task path per line on stdin, one
    JSON line each on stdout (its "path" added), until stdin closes: many tasks for one interpreter's
    imports (fit.TaskCounter; a sweep counts its 250 problems so)."""
    import json
    import sys

    if argv and argv[0] == "--stream":
        seed, precision = int(argv[1]), argv[2]
        for line in sys.stdin:
            path = line.rstrip("\n")
            if path:
                print(json.dumps({**count_task(path, seed, precision), "path": path}), flush=True)
        return 0
    print(json.dumps(count_task(argv[0], int(argv[1]), argv[2])))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(footprint_main(sys.argv[1:]))
