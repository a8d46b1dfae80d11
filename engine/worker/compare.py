"""Output comparison: shapes, dtypes, tolerances, non-finite values and the worst elements."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from cudaforge.engine import check_kernels
from cudaforge.engine.observe import checkpoint, common_order, coordinates, paired_pieces, slice_elements
from cudaforge.engine.results import OutputCheck, WorstElement
from cudaforge.engine.worker import device_heads

_CHUNK: int | None = None  # elements per compared slice where set (tests); else observe.slice_elements

DEFAULT_TOLERANCE = {"fp32": (1e-4, 1e-4), "fp16": (1e-2, 1e-2), "bf16": (2e-2, 2e-2)}


def flatten_outputs(out: Any) -> list[Any]:
    if isinstance(out, (tuple, list)):
        return list(out)
    return [out]


def compare_output(index: int, expected: Any, got: Any, atol: float, rtol: float, worst_k: int = 5) -> OutputCheck:
    """Compare one output; integer and bool tensors must match exactly."""
    if not isinstance(expected, torch.Tensor):
        same = type(got) is type(expected) and got == expected
        return OutputCheck(index=index, passed=bool(same), shape_expected=(), shape_got=(),
                           dtype_expected=type(expected).__name__, dtype_got=type(got).__name__,
                           reason="" if same else f"non-tensor output differs: expected {expected!r}, got {got!r}")
    base = dict(index=index, shape_expected=tuple(expected.shape), dtype_expected=str(expected.dtype).replace("torch.", ""))
    if not isinstance(got, torch.Tensor):
        return OutputCheck(passed=False, shape_got=(), dtype_got=type(got).__name__,
                           reason=f"expected a tensor, got {type(got).__name__}", **base)
    base.update(shape_got=tuple(got.shape), dtype_got=str(got.dtype).replace("torch.", ""))
    if got.shape != expected.shape:
        return OutputCheck(passed=False, reason=f"shape {tuple(got.shape)} != expected {tuple(expected.shape)}", **base)
    if got.dtype != expected.dtype:
        return OutputCheck(passed=False, reason=f"dtype {got.dtype} != expected {expected.dtype}", **base)
    # Where the device tensor lives: an expected output waiting on the host comes over slice by slice.
    where = expected.device if expected.device.type != "cpu" else got.device
    numel = expected.numel()
    if numel == 0:
        return OutputCheck(passed=True, numel=0, **base)
    exact = not (expected.is_floating_point() or expected.is_complex())
    work = torch.float64 if (exact or expected.dtype == torch.float64) else torch.float32
    # In slices: full-size float temporaries (diff, masks, copies) would each cost the output's size again.
    # One pass per slice, its statistics kept on the device: the host waits once at the end, not per slice.
    # Both in one element order (observe.common_order): views where a side is laid out in it, else copies
    # of one slice at a time; never a copy of a whole output.
    e_in, g_in = expected.detach(), got.detach()
    memory_dims = common_order(e_in, g_in)
    ep, gp = e_in.permute(memory_dims), g_in.permute(memory_dims)
    fused = None
    if not (exact or _CHUNK or worst_k > check_kernels.TOP) and ep.is_contiguous() and gp.is_contiguous():
        fused = check_kernels.compare_stats(ep.view(-1), gp.view(-1), atol, rtol)
    if fused is not None:  # both on one GPU in one layout: one pass, the same statistics (check_kernels.py)
        stats, vals, idxs = fused
    else:
        pieces = paired_pieces(e_in, g_in, memory_dims, _CHUNK or slice_elements(where))
        stats, vals, idxs = _compare_in_slices(pieces, where, work, exact, atol, rtol, worst_k)
    k = min(worst_k, numel, vals.numel())
    order = vals.topk(k).indices
    count, nonfinite_f, max_abs, max_rel = stats.tolist()
    mismatches, nonfinite = int(count), int(nonfinite_f)
    if max_abs == 0:
        max_rel = 0.0
    if mismatches and nonfinite:
        max_rel = float("inf")
    worst: list[WorstElement] = []
    if max_abs > 0:
        top = [(v, fi) for v, fi in zip(vals[order].tolist(), idxs[order].tolist(), strict=True) if v > 0]
        if top:
            coords = coordinates([fi for _, fi in top], expected.shape, memory_dims)  # back from that order
            e_vals = [float(e_in[c].to(work)) for c in coords]
            g_vals = [float(g_in[c].to(work)) for c in coords]
            worst = [WorstElement(index=c, expected=ev, got=gv, abs_err=float(v))
                     for (v, _), c, ev, gv in zip(top, coords, e_vals, g_vals, strict=True)]
    finite_all = nonfinite == 0
    reason = ""
    if mismatches:
        reason = f"{mismatches} of {numel} elements outside atol={atol:g} rtol={rtol:g}"
        if nonfinite:
            reason += f" ({nonfinite} non-finite)"
    return OutputCheck(passed=mismatches == 0, max_abs_err=max_abs, max_rel_err=max_rel, mismatches=mismatches,
                       numel=numel, nonfinite_got=0 if finite_all else nonfinite, worst=tuple(worst), reason=reason, **base)


def _compare_in_slices(pieces: Iterable[tuple[int, Any, Any]], where: Any, work: Any, exact: bool, atol: float,
                       rtol: float, worst_k: int, fuse: bool = True) -> tuple[Any, Any, Any]:
    """(stats, largest abs errors, their flat indices) over `pieces` (observe.paired_pieces: offset, expected
    slice, got slice), a slice at a time: the fused kernel per slice where it applies (`fuse`), else the
    PyTorch form (the tests' reference for the kernel)."""
    stats = torch.zeros(4, dtype=torch.float64, device=where)  # mismatches, non-finite, max abs, max rel
    top_vals: list[Any] = []
    top_idx: list[Any] = []
    # On a GPU, a float slice that came over from the host is compared by the fused kernel (one pass, as
    # compare_output's whole-tensor path) rather than by a dozen PyTorch passes with temporaries: with
    # eight evaluations time-sliced on one GPU those passes were most of a 6 GiB output's compare.
    fusable = fuse and not exact and not _CHUNK and worst_k <= check_kernels.TOP
    for start, e_part, g_part in pieces:
        fused = None
        if fusable and e_part.dtype == g_part.dtype:
            e = _over(e_part, where)
            g = _over(g_part, where)
            fused = check_kernels.compare_stats(e, g, atol, rtol)
        if fused is not None:
            part, values, idx = fused
        else:
            e = _over(e_part, where, work)
            g = _over(g_part, where, work)
            part, diff = _compare_slice(e, g, exact, atol, rtol)
            values, idx = diff.topk(min(worst_k, diff.numel()))
            del diff
        stats[:2] += part[:2]
        stats[2:] = torch.maximum(stats[2:], part[2:])
        top_vals.append(values)
        top_idx.append(idx + start)
        del e, g, e_part, g_part
        checkpoint()  # a step boundary: a timed window waiting elsewhere goes first (no-op inside a window)
    return stats, torch.cat(top_vals), torch.cat(top_idx)


def _over(part: Any, where: Any, dtype: Any = None) -> Any:
    """A compared slice on the compare's device: where it is a slice of a parked host copy within that copy's
    device head (worker/device_heads.py), read there; else copied over (from the host: counted)."""
    if part.device.type == "cpu":
        head = device_heads.on_device(part)
        if head is not None and head.device == where:
            return head if dtype is None else head.to(dtype)
        if part.device != where:
            device_heads.copied_over(part)
    return part.to(device=where, dtype=dtype, non_blocking=True)


def _compare_slice(e: Any, g: Any, exact: bool, atol: float, rtol: float) -> tuple[Any, Any]:
    """One slice, without a host sync: ([mismatches, non-finite in got, max abs err, max rel err] as a
    float64 tensor on the slice's device, abs err per element)."""
    zero = torch.zeros((), dtype=torch.float64, device=e.device)
    if exact:
        bad = g != e
        diff = (g - e).abs()
        nonfinite = zero
    elif e.device.type == "cpu" and bool(torch.isfinite(g).all()) and bool(torch.isfinite(e).all()):
        # On the host a check costs no device sync: all-finite slices (the usual case) take the short path.
        diff = (g - e).abs()
        scale = e.abs()
        bad = diff > (atol + rtol * scale)
        part = torch.stack([bad.sum().to(torch.float64), zero, diff.max().to(torch.float64),
                            (diff / scale.clamp_min(1e-12)).max().to(torch.float64)])
        return part, diff
    else:
        finite_g = torch.isfinite(g)
        finite_e = torch.isfinite(e)
        diff = (g - e).abs()
        bad = diff > (atol + rtol * e.abs())
        # A non-finite value passes only where the reference has the very same non-finite value.
        same_nonfinite = (~finite_g) & (~finite_e) & ((g == e) | (torch.isnan(g) & torch.isnan(e)))
        both_finite = finite_g & finite_e
        bad = torch.where(both_finite, bad, ~same_nonfinite)
        diff = torch.where(both_finite, diff, torch.full_like(diff, float("inf")))
        diff = torch.where(same_nonfinite, torch.zeros_like(diff), diff)
        nonfinite = (~finite_g).sum().to(torch.float64)
    finite_diff = torch.where(torch.isfinite(diff), diff, torch.zeros_like(diff))
    max_rel = (finite_diff / e.abs().clamp_min(1e-12)).max()
    part = torch.stack([bad.sum().to(torch.float64), nonfinite, diff.max().to(torch.float64),
                        max_rel.to(torch.float64)])
    return part, diff
