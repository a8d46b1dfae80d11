"""How the worker and the integrity checks observe a run, without either importing the other: exact
tensor fingerprints and bit-equality computed in slices (no full-size copy), the slice size every
whole-tensor pass uses, and which of the candidate's own kernels launched.

Both engine/worker/ and engine/integrity/ import this module; an import-linter contract keeps
engine/integrity/ from importing engine/worker/.
"""

from __future__ import annotations

import contextlib
import secrets
import sys
from collections.abc import Callable, Iterator
from typing import Any

CHUNK_ELEMENTS = 1 << 20  # elements per slice of a whole-tensor pass (fingerprints, compares, the fixed-value
# probe) on the host: its temporaries (a few float64 or int64 copies of a slice) stay within tens of MiB,
# beside the reference's own peak
DEVICE_CHUNK_ELEMENTS = 1 << 22  # the same on a GPU: each slice costs ~20 kernel launches whatever its size, so
# 1M-element slices of a 6 GiB tensor were 30k launches a pass (a minute of checks); at 4M the temporaries
# stay within ~160 MiB (memory.TIGHT_SLACK_BYTES holds them under a cap)
# The NVTX range whose kernels ncu profiles (engine/profiling/runner.py filters on it; the worker's profile mode
# calls the candidate inside it), and the kernel a profile spare launches inside it while it warms up, so
# ncu's profiling session is set up before the job (its rows are dropped from the report).
PROFILED_RANGE = "candidate"
NCU_WARM_KERNEL = "cudaforge_ncu_warm"
EXT_RANGE = "cudaforge_ext::"  # profiler label of extension-function calls while a BuildRecorder's `label_calls` is set


def tensor_bytes(values: Any) -> int:
    """Bytes of the tensors among `values` (an iterable; other values count nothing)."""
    import torch

    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def storage_address(t: Any) -> int:
    """The address of the memory `t` lives in (its untyped storage's): views of one tensor share it."""
    return int(t.untyped_storage().data_ptr())


def storage_addresses(values: Any) -> set[int]:
    """The storage addresses of the non-empty tensors among `values` (others skipped): two sets that meet
    share memory (an output that aliases an input, a parameter, an expected output handed back)."""
    import torch

    return {storage_address(v) for v in values if isinstance(v, torch.Tensor) and v.numel() > 0}


def slice_elements(device: Any) -> int:
    """Elements per slice of a whole-tensor pass over a tensor on `device` (a torch.device or its type)."""
    kind = getattr(device, "type", device)
    return DEVICE_CHUNK_ELEMENTS if kind == "cuda" else CHUNK_ELEMENTS


def memory_order(t: Any) -> tuple[int, ...] | None:
    """The permutation that lists a dense tensor's dimensions in the order of its memory (largest stride
    first): `t.permute(order)` is then contiguous, a view of the same memory. None where no permutation
    makes it contiguous (overlapping or gapped layouts). An attention output transposed in memory
    (level1/97's scaled_dot_product_attention) is dense but not contiguous: flattening it with
    reshape(-1) copied all of it, 2 GiB a side in each cache probe's compare on the H200."""
    dims = tuple(range(t.dim()))
    if t.is_contiguous():
        return dims
    order = tuple(sorted(dims, key=lambda d: (-t.stride(d), d)))
    return order if t.permute(order).is_contiguous() else None


def flat_view(t: Any) -> Any:
    """`t`'s elements as one flat tensor in memory order: a view for every dense layout, a copy only for
    the others. For passes whose result does not depend on the elements' order (min, max, sums, bounds)."""
    order = memory_order(t)
    return t.permute(order).view(-1) if order is not None else t.reshape(-1)


def common_order(expected: Any, got: Any) -> tuple[int, ...]:
    """One element order for comparing two tensors of one shape: the memory order of the one that lives on
    a GPU where exactly one does (its pieces are then views, and only the host side's are copied, a piece at
    a time), else of `expected`, else of `got`, else the logical order."""
    first, second = (got, expected) if got.device.type != "cpu" and expected.device.type == "cpu" else (expected, got)
    return memory_order(first) or memory_order(second) or tuple(range(expected.dim()))


def paired_pieces(expected: Any, got: Any, order: tuple[int, ...], step: int) -> Iterator[tuple[int, Any, Any]]:
    """(offset, e, g): flat pieces of two tensors of one shape, in `order` (common_order), at most `step`
    elements each, `offset` counting in that order. A side laid out in that order gives views; the other
    gives copies of one piece at a time, never of the whole tensor: a reference whose output is transposed
    in memory beside a candidate's contiguous one (an attention kernel's) costs no output-sized copy."""
    yield from _pieces(expected.permute(order), got.permute(order), step, 0)


def _pieces(e: Any, g: Any, step: int, offset: int) -> Iterator[tuple[int, Any, Any]]:
    n = e.numel()
    if n == 0:
        return
    if e.is_contiguous() and g.is_contiguous():
        e, g = e.view(-1), g.view(-1)
    if e.dim() <= 1:
        e, g = e.reshape(-1), g.reshape(-1)  # a 0-d tensor as one element; 1-D stays as it is
        for start in range(0, n, step):
            yield offset + start, e[start:start + step].reshape(-1), g[start:start + step].reshape(-1)
        return
    inner = n // e.shape[0]
    if inner >= step:  # one row is a slice or more: each row on its own
        for i in range(e.shape[0]):
            yield from _pieces(e[i], g[i], step, offset + i * inner)
        return
    rows = step // inner
    for i in range(0, e.shape[0], rows):
        yield offset + i * inner, e[i:i + rows].reshape(-1), g[i:i + rows].reshape(-1)


def coordinates(flat_indices: list[int], shape: Any, order: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Tensor coordinates of flat indices counted in `order` (paired_pieces' offsets). Plain integer
    arithmetic: torch.unravel_index's argument check imports torch.fx.experimental.symbolic_shapes (sympy
    and more, about 1.8 s under a sweep's load on the H200), and this runs inside timed windows, wherever a
    sampled timed output differs from the expected one at all (TF32 convolutions: every cuDNN problem)."""
    if not len(shape):
        return [() for _ in flat_indices]
    permuted = [int(shape[d]) for d in order]
    out = []
    for flat in flat_indices:
        rest, coords = int(flat), [0] * len(permuted)
        for k in range(len(permuted) - 1, -1, -1):
            rest, coords[k] = divmod(rest, permuted[k]) if permuted[k] else (rest, 0)
        out.append(tuple(coords[order.index(d)] for d in range(len(order))))
    return out


# The fingerprint's position weights are keyed per process (drawn when this module is imported, before any
# candidate code runs): a change that keeps both sums cannot be planned from the source, only by reading
# this process's memory, which is tampering (integrity/evidence.py harness checks) and out of the sums' reach.
_PRIME = 2147483629  # the largest prime below 2**31: weights stay below 2**31, products below 2**63
_KEY = (secrets.randbelow(_PRIME - 1) + 1, secrets.randbelow(_PRIME))


def fingerprint(t: Any) -> tuple[Any, ...]:
    """An exact-content fingerprint of a tensor, computed in slices on its device, so no copy of it is
    kept: on a GPU two integer sums of its raw 32-bit words, one plain and one weighted by a keyed
    universal hash of each word's position (any change of a word moves the weighted sum unless it is
    matched by a change elsewhere that depends on the key); on the host a BLAKE2b hash of its bytes.
    Used wherever a full copy would exist only to be compared later: the inputs of both sides around
    their calls, the outputs a cache probe compares with the next call's."""
    import torch

    if not isinstance(t, torch.Tensor):
        return (0,)
    return fingerprints([t])[0]


def fingerprints(values: list[Any]) -> list[Any]:
    """Each tensor's fingerprint (`fingerprint`); other values as they are (compared by value). The GPU
    tensors' sums are all queued first and read back together, one host sync per device: the shared
    weights' check fingerprints every parameter after each candidate call (hundreds in a DenseNet), and a
    sync per tensor waited each time for the GPU's turn among the processes beside it."""
    import torch

    out = list(values)
    queued: dict[Any, list[tuple[int, Any, int, str]]] = {}  # device -> (index, its two sums queued, numel, dtype)
    for k, v in enumerate(values):
        if not isinstance(v, torch.Tensor):
            continue
        if v.numel() == 0:
            out[k] = (0,)
        elif v.device.type == "cpu":
            out[k] = _host_fingerprint(v)
        else:
            queued.setdefault(v.device, []).append((k, word_sums_queued(_words(v)), v.numel(), str(v.dtype)))
    for entries in queued.values():
        sums = torch.stack([q for _, q, _, _ in entries]).tolist()  # one sync for all of this device's tensors
        for (k, _, numel, dtype), (plain, weighted) in zip(entries, sums, strict=True):
            out[k] = (int(plain), int(weighted), numel, dtype)
    return out


def signature(values: list[Any] | tuple[Any, ...], prints: list[Any] | tuple[Any, ...]) -> tuple[Any, ...]:
    """Values as a fingerprint can tell them apart: each tensor's fingerprint (observe.fingerprints, in memory
    order) with its shape and strides (the same words in another layout are other values), others as
    they are."""
    import torch

    return tuple((p, tuple(v.shape), tuple(v.stride())) if isinstance(v, torch.Tensor) else p
                 for v, p in zip(values, prints, strict=True))


def _host_fingerprint(t: Any) -> tuple[Any, ...]:
    """On the host a real hash of the bytes is cheaper than the sums."""
    import hashlib

    import torch

    data = t.detach().contiguous().view(-1).view(torch.uint8).numpy()
    return (hashlib.blake2b(memoryview(data), digest_size=16).hexdigest(), t.numel(), str(t.dtype))


def _words(t: Any) -> Any:
    """A tensor's memory as flat raw words (int32 where its size and offset allow, else bytes): a view of a
    dense tensor, a copy of one that is not."""
    import torch

    flat = flat_view(t.detach())  # the memory's words in memory order: no copy of a dense tensor
    if not flat.is_contiguous():
        flat = flat.contiguous()
    nbytes = flat.numel() * flat.element_size()
    raw = flat.view(torch.uint8)
    if nbytes % 4 == 0:
        with contextlib.suppress(RuntimeError):  # a view at an offset not aligned to 4 bytes stays in bytes
            raw = raw.view(torch.int32)
    return raw


def word_sums(raw: Any) -> tuple[int, int]:
    """The GPU fingerprint's two sums over a flat integer tensor (the raw words), in slices where it
    lives: the plain sum and the sum weighted by the keyed hash of each position (both modulo 2**64)."""
    plain, weighted = word_sums_queued(raw).tolist()
    return int(plain), int(weighted)


def word_sums_queued(raw: Any) -> Any:
    """word_sums as a 2-element int64 tensor on the words' device, its work queued and not waited for."""
    if raw.device.type == "cuda":
        from cudaforge.engine import check_kernels

        fused = check_kernels.word_sums_queued(raw, _KEY)  # one launch; the same sums (check_kernels.py)
        if fused is not None:
            return fused
    return _word_sums_in_slices_queued(raw)


def word_sums_in_slices(raw: Any) -> tuple[int, int]:
    """word_sums' PyTorch form (the host, and the GPU where the fused kernel cannot run)."""
    plain, weighted = _word_sums_in_slices_queued(raw).tolist()
    return int(plain), int(weighted)


def _word_sums_in_slices_queued(raw: Any) -> Any:
    import torch

    s1 = torch.zeros((), dtype=torch.int64, device=raw.device)
    s2 = torch.zeros((), dtype=torch.int64, device=raw.device)
    step = slice_elements(raw.device)
    scale, shift = _KEY
    for start in range(0, raw.numel(), step):
        part = raw[start:start + step].to(torch.int64)
        weight = torch.arange(start, start + part.numel(), device=raw.device, dtype=torch.int64)
        weight.mul_(scale).add_(shift).remainder_(_PRIME).add_(1)
        s1 += part.sum()
        s2 += (part * weight).sum()
        del part, weight
    return torch.stack((s1, s2))


def bits_equal(a: Any, b: Any) -> bool:
    """Exact (bitwise, so NaN equals the same NaN) equality of two tensors, in slices: no full-size mask,
    and a `b` on another device (a host snapshot) moves over one slice at a time, never whole. One host
    sync at the end."""
    import torch

    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return a is b or a == b
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    fa = a.detach().contiguous().view(-1).view(torch.uint8)
    fb = b.detach().contiguous().view(-1).view(torch.uint8)
    step = slice_elements(fa.device) * 4
    if fa.device.type == "cpu" and fb.device.type == "cpu":  # no host sync to save: no mask either
        return all(torch.equal(fa[i:i + step], fb[i:i + step]) for i in range(0, fa.numel(), step))
    differ = torch.zeros((), dtype=torch.bool, device=fa.device)
    for i in range(0, fa.numel(), step):
        differ |= (fa[i:i + step] != fb[i:i + step].to(fa.device, non_blocking=True)).any()
    return not bool(differ)


# ------------------------------------------------------------------ step boundaries

_CHECKPOINTS: list[Callable[[], None]] = []


def on_checkpoint(fn: Callable[[], None]) -> None:
    """Have `fn` called at every step boundary of the checks (the worker: let a waiting timed window go)."""
    if fn not in _CHECKPOINTS:
        _CHECKPOINTS.append(fn)


def checkpoint() -> None:
    """A step boundary of side-by-side work (a trial, a probe, a phase): no tensor of the step is in flight."""
    for fn in _CHECKPOINTS:
        fn()


def untimed_part(name: str) -> contextlib.AbstractContextManager[None]:
    """The `part` of a check run with no phase clock (tests, benches): its sub-steps are timed nowhere. The
    worker passes its `sub_phase` instead, so each sub-step shows among the phases."""
    return contextlib.nullcontext()


# ------------------------------------------------------------------ what launched


def custom_launches(recorder: Any) -> dict[str, int]:
    counts = dict(recorder.calls)
    nvrtc = sys.modules.get("cudaforge.engine.nvrtc")
    if nvrtc is not None:
        counts.update({f"nvrtc:{k}": v for k, v in nvrtc.LAUNCH_COUNTS.items()})
    triton_launches = sys.modules.get("cudaforge.engine.worker.triton_support")
    if triton_launches is not None:
        counts.update(triton_launches.launches())
    return counts


def reset_launches(recorder: Any) -> None:
    recorder.calls.clear()
    nvrtc = sys.modules.get("cudaforge.engine.nvrtc")
    if nvrtc is not None:
        nvrtc.LAUNCH_COUNTS.clear()
    triton_launches = sys.modules.get("cudaforge.engine.worker.triton_support")
    if triton_launches is not None:
        triton_launches.LAUNCH_COUNTS.clear()


def device_profile() -> Any:
    """A profiler session that records the device's activities only (CUPTI, through Kineto): the kernel
    check and the CUPTI busy-time timer. It is torch.autograd.profiler's session, which is what
    torch.profiler.profile(activities=[CUDA]) opens, without that wrapper, whose start asks
    `hasattr(torch, "_inductor")` and so imports torch._inductor and torch._dynamo (1.7 s on this project's
    CPU machine) for a setting that only matters to compiled graphs. Its records: `key_averages()`,
    `function_events`, and the raw `kineto_results` once it has ended."""
    from torch.autograd import profiler

    return profiler.profile(use_cpu=False, use_device="cuda", use_kineto=True)


def host_profile() -> Any:
    """A profiler session of the host's operators with their input shapes (the CPU device's fallback
    check), likewise without torch.profiler's imports."""
    from torch.autograd import profiler

    return profiler.profile(use_cpu=True, record_shapes=True, use_kineto=True)
