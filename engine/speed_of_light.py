"""Speed of light: the least time a task's work can take on a card, and how close a candidate comes.

floor = max(bytes that must move / DRAM bandwidth, FLOPs / the highest peak the task's precision and
tolerance admit). The bytes are the inputs and parameters read once and the outputs written once; the
FLOPs are what `torch.utils.flop_counter.FlopCounterMode` counts on the reference (matmuls, convolutions,
attention; elementwise work counts zero). The byte floor is the one true floor: a candidate below it
fails (`faster_than_memory_bound`, engine/integrity/evidence.py uses `byte_floor_ms` from here). A FLOP
floor is no true floor (Winograd and similar do less arithmetic), so it only feeds `sol_fraction` and
the hold rules. torch is imported lazily (only `count_work` needs it).

On the CPU device there is no GPU spec: the bytes and FLOPs are still counted and recorded, the floor
and `sol_fraction` are absent and `note` says so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from cudaforge.engine.observe import tensor_bytes
from cudaforge.engine.results import Peaks, SpeedOfLight

# A TF32 product keeps 10 mantissa bits: one unit in the last place is 2^-10 of the value. A tolerance
# tighter than that (relative and absolute) cannot hold TF32 matmuls, so their peak is not admitted.
TF32_ADMITTED_TOLERANCE = 2.0 ** -10
NO_GPU_NOTE = "no GPU spec on the CPU device: the floor needs a card's DRAM bandwidth and peaks"


def peaks_from_spec(spec: Any) -> Peaks | None:
    """The figures of a `GpuSpec` (engine/gpu/specs.py) the floor uses; None without a spec."""
    if spec is None:
        return None
    return Peaks(gpu=str(getattr(spec, "name", "")), dram_bandwidth_gbs=getattr(spec, "dram_bandwidth_gbs", None),
                 fp32_tflops=getattr(spec, "fp32_tflops", None),
                 tf32_tensor_tflops=getattr(spec, "tf32_tensor_tflops", None),
                 fp16_tensor_tflops=getattr(spec, "fp16_tensor_tflops", None),
                 bf16_tensor_tflops=getattr(spec, "bf16_tensor_tflops", None))


def admitted_peak(peaks: Peaks, precision: str, atol: float, rtol: float) -> tuple[str, float | None]:
    """The highest FLOP peak the task's precision and tolerance admit, and its name.

    fp32: CUDA-core FP32, or TF32 tensor cores when the tolerance admits TF32 (both atol and rtol at
    least 2^-10); fp16/bf16: that type's tensor cores. A peak the spec lacks is skipped."""
    admitted = [("fp32", peaks.fp32_tflops)]
    if precision == "fp32" and min(atol, rtol) >= TF32_ADMITTED_TOLERANCE:
        admitted.append(("tf32_tensor", peaks.tf32_tensor_tflops))
    if precision == "fp16":
        admitted.append(("fp16_tensor", peaks.fp16_tensor_tflops))
    if precision == "bf16":
        admitted.append(("bf16_tensor", peaks.bf16_tensor_tflops))
    known = [(name, value) for name, value in admitted if value]
    if not known:
        return "", None
    return max(known, key=lambda item: item[1])


def byte_floor_ms(nbytes: int, bandwidth_gbs: float) -> float:
    """Moving `nbytes` once at the card's DRAM bandwidth, in ms: the one rule every user of it shares."""
    return nbytes / (bandwidth_gbs * 1e9) * 1e3


def flop_floor_ms(flops: int, peak_tflops: float) -> float:
    return flops / (peak_tflops * 1e12) * 1e3


def floor(work: SpeedOfLight, peaks: Peaks | None, precision: str, atol: float, rtol: float,
          candidate_ms: float | None) -> SpeedOfLight:
    """The counted work (`count_work`) with its floors, the bound that set the floor and `sol_fraction`."""
    if peaks is None or not peaks.dram_bandwidth_gbs:
        return replace(work, candidate_ms=candidate_ms, note=work.note or NO_GPU_NOTE)
    byte_ms = byte_floor_ms(work.bytes, peaks.dram_bandwidth_gbs)
    peak_name, peak = admitted_peak(peaks, precision, atol, rtol)
    flop_ms = flop_floor_ms(work.flops, peak) if work.flops is not None and peak else None
    notes = [work.note] if work.note else []
    if work.flops is not None and not peak:
        notes.append(f"the {peaks.gpu or 'GPU'} spec has no FLOP peak for {precision}")
    top = max(byte_ms, flop_ms or 0.0)
    bound = "compute" if flop_ms is not None and flop_ms > byte_ms else "memory"
    fraction = top / candidate_ms if candidate_ms and candidate_ms > 0 else None
    return replace(work, bandwidth_gbs=peaks.dram_bandwidth_gbs, peak_tflops=peak, peak=peak_name,
                   byte_floor_ms=byte_ms, flop_floor_ms=flop_ms, floor_ms=top, bound=bound,
                   candidate_ms=candidate_ms, sol_fraction=fraction, gpu=peaks.gpu, note="; ".join(notes))


def _flatten(out: Any) -> list[Any]:
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flatten(o)]
    return [out]


def read_bytes(model: Any, inputs: Sequence[Any]) -> tuple[int, int]:
    """(input bytes, parameter and buffer bytes) of one reference call, as count_work counts them: also what
    says whether a count made elsewhere (the app's, on the meta device) is of these inputs and parameters."""
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    return tensor_bytes(inputs), tensor_bytes(state.values())


def count_work(model: Any, inputs: Sequence[Any], *, real_output_bytes: Callable[[], int] | None = None,
               quiet_meta: Any = None) -> SpeedOfLight:
    """Bytes and FLOPs of one reference call, counted on the meta device (no memory, no compute): the
    module's parameters and buffers and the inputs are swapped for meta tensors of the same shapes.

    A reference that cannot run on the meta device (`.item()`, data-dependent shapes) keeps its input and
    parameter bytes, takes `real_output_bytes()` (measured on a real call) and has no FLOP count.
    `quiet_meta` is a context manager that answers slow meta paths (recurrent layers) with shapes."""
    import torch
    from torch.func import functional_call
    from torch.utils.flop_counter import FlopCounterMode

    input_bytes, param_bytes = read_bytes(model, inputs)
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}

    def meta(t: Any) -> Any:
        return torch.empty_like(t, device="meta") if isinstance(t, torch.Tensor) else t

    try:
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), torch.device("meta"), quiet_meta or contextlib.nullcontext(), counter:
            out = functional_call(model, {k: meta(v) for k, v in state.items()}, tuple(meta(x) for x in inputs))
        return SpeedOfLight(input_bytes=input_bytes, param_bytes=param_bytes,
                            output_bytes=tensor_bytes(_flatten(out)), flops=int(counter.get_total_flops()))
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:120]
        return SpeedOfLight(input_bytes=input_bytes, param_bytes=param_bytes,
                            output_bytes=real_output_bytes() if real_output_bytes is not None else 0,
                            note=f"FLOPs not counted: the reference cannot run on the meta device "
                                 f"({type(exc).__name__}: {first})")


def describe(sol: SpeedOfLight, measured_dram_bytes: float | None = None) -> list[str]:
    """The arithmetic, line by line, for the Review pane and `cudaforge eval`."""
    mb = sol.bytes / 1e6
    lines = [f"bytes: {sol.input_bytes / 1e6:.3f} MB inputs + {sol.param_bytes / 1e6:.3f} MB parameters + "
             f"{sol.output_bytes / 1e6:.3f} MB outputs = {mb:.3f} MB"]
    if sol.byte_floor_ms is not None and sol.bandwidth_gbs:
        lines[-1] += f" / {sol.bandwidth_gbs:g} GB/s = {sol.byte_floor_ms * 1e3:.2f} µs"
    if measured_dram_bytes is not None:
        lines.append(f"ncu measured DRAM traffic: {measured_dram_bytes / 1e6:.3f} MB (shown; never lowers the floor)")
    if sol.flops is not None:
        text = f"FLOPs (FlopCounterMode): {sol.flops:,}"
        if sol.flop_floor_ms is not None and sol.peak_tflops:
            text += f" / {sol.peak_tflops:g} TFLOPS ({sol.peak}) = {sol.flop_floor_ms * 1e3:.2f} µs"
        lines.append(text)
    if sol.floor_ms is not None:
        lines.append(f"floor: {sol.floor_ms * 1e3:.2f} µs ({sol.bound} bound)"
                     + (f"; candidate {sol.candidate_ms * 1e3:.2f} µs → {sol.sol_fraction:.1%} of speed of light"
                        if sol.sol_fraction is not None and sol.candidate_ms else ""))
    if sol.note:
        lines.append(sol.note)
    return lines


def short(sol: SpeedOfLight | None) -> str:
    """'37% SOL' for tables; '' when absent."""
    if sol is None or sol.sol_fraction is None:
        return ""
    return f"{sol.sol_fraction:.0%} SOL"
