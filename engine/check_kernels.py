"""Fused CUDA passes for the checks: one kernel launch per tensor where the PyTorch form costs ~10
launches per 4M-element slice and float64 temporaries.

The checks read every element of every input and output several times per trial (fingerprints before and
after each side's call, the output comparison, the fixed-value bounds). In PyTorch each of those is a
chain of elementwise ops and reductions per slice, each a launch and a temporary; on a 128 MiB tensor that
was 8-40 ms a pass, most of it launch overhead and host syncs (H200, 2026-12-03: fingerprints 0.13 s,
fixed-value bounds 0.15 s and comparisons 0.17-0.26 s of a small example's correctness phase). Here each
pass is one grid-stride kernel that reads the tensor once and writes one small row per block; PyTorch then
reduces those rows (a few hundred values) and the host reads them with one sync.

Every kernel computes exactly what its PyTorch form computes (the same float32/float64 operations in the
same order, no contraction into FMAs, sums modulo 2**64), so the two forms agree bit for bit and the
PyTorch form stays the reference and the fallback: for CPU tensors, dtypes the kernels do not take, and
wherever NVRTC or the driver is unavailable (the first failure is remembered and said once).

The kernels are named `cudaforge_check_*`: the kernel checks (integrity/runtime.py `cuda_kernel_totals`)
leave out every kernel whose name starts with `cudaforge`, and they are launched through the driver
directly, so they never count as a candidate's own launches (nvrtc.LAUNCH_COUNTS).
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass
from typing import Any

THREADS = 256
TOP = 5  # worst elements kept per block by the comparison (compare.py reports at most this many)

_SOURCE = r"""
typedef unsigned long long u64;
typedef long long i64;

#define CF_THREADS 256
#define CF_TOP 5

__device__ __forceinline__ float cf_load(const unsigned short* p, i64 i, int kind)
{
    const unsigned short h = p[i];
    if (kind == 1) {  // float16 (exact in float32), without cuda_fp16.h: NVRTC may have no toolkit headers
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
        return f;
    }
    return __uint_as_float(((unsigned int)h) << 16);  // bfloat16
}

template <typename T>
__device__ __forceinline__ T cf_block_sum(T v, T* shared)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    T total = 0;
    if (threadIdx.x == 0) {
        for (int w = 0; w < CF_THREADS / 32; ++w) total += shared[w];
    }
    __syncthreads();
    return total;
}

// observe.word_sums: the plain and the keyed-position-weighted sums of int32 words, modulo 2**64.
extern "C" __global__ void cudaforge_check_word_sums(const int* __restrict__ w, i64 n, i64 scale, i64 shift,
                                                     i64 start, u64* __restrict__ rows)
{
    __shared__ u64 shared[CF_THREADS / 32];
    u64 s1 = 0, s2 = 0;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const i64 v = (i64)w[i];
        // (position * scale + shift) mod P + 1, with PyTorch's int64 wrap-around and Python's sign rule
        const i64 x = (i64)((u64)(start + i) * (u64)scale + (u64)shift);
        i64 r = x % 2147483629LL;
        if (r < 0) r += 2147483629LL;
        s1 += (u64)v;
        s2 += (u64)(v * (r + 1));
    }
    s1 = cf_block_sum<u64>(s1, shared);
    s2 = cf_block_sum<u64>(s2, shared);
    if (threadIdx.x == 0) {
        rows[2 * blockIdx.x] = s1;
        rows[2 * blockIdx.x + 1] = s2;
    }
}

// compare.py `_compare_slice` for float outputs (float32 work): per block the mismatch count, the count
// of non-finite values in `got`, the largest abs error, the largest relative error (of finite errors),
// and its CF_TOP largest abs errors with their flat indices.
template <typename T>
__device__ void cf_compare(const T* __restrict__ e, const T* __restrict__ g, int kind, i64 n, float atol, float rtol,
                           double* __restrict__ stats, float* __restrict__ top_vals, i64* __restrict__ top_idx)
{
    __shared__ u64 shared_count[CF_THREADS / 32];
    __shared__ float shared_val[CF_THREADS * CF_TOP];
    __shared__ i64 shared_idx[CF_THREADS * CF_TOP];
    u64 bad_count = 0, nonfinite = 0;
    float max_abs = 0.f, max_rel = 0.f;
    int rel_nan = 0;  // PyTorch's max propagates NaN: an expected NaN makes the relative error NaN
    float tv[CF_TOP];
    i64 ti[CF_TOP];
    for (int k = 0; k < CF_TOP; ++k) { tv[k] = -1.f; ti[k] = -1; }
    const float tiny = 1e-12f;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float ev, gv;
        if (kind == 0) { ev = ((const float*)e)[i]; gv = ((const float*)g)[i]; }
        else { ev = cf_load((const unsigned short*)e, i, kind); gv = cf_load((const unsigned short*)g, i, kind); }
        const bool fin_g = isfinite(gv), fin_e = isfinite(ev);
        float diff = fabsf(__fsub_rn(gv, ev));
        bool bad = diff > __fadd_rn(atol, __fmul_rn(rtol, fabsf(ev)));
        const bool same_nonfinite = !fin_g && !fin_e && (gv == ev || (isnan(gv) && isnan(ev)));
        if (!(fin_g && fin_e)) {
            bad = !same_nonfinite;
            diff = __int_as_float(0x7f800000);  // inf
        }
        if (same_nonfinite) diff = 0.f;
        if (!fin_g) ++nonfinite;
        if (bad) ++bad_count;
        max_abs = fmaxf(max_abs, diff);
        const float finite_diff = isfinite(diff) ? diff : 0.f;
        if (isnan(ev)) rel_nan = 1;  // clamp_min(NaN) is NaN in PyTorch, so is the ratio
        else max_rel = fmaxf(max_rel, __fdiv_rn(finite_diff, fmaxf(fabsf(ev), tiny)));
        if (diff > tv[CF_TOP - 1]) {  // keep this thread's CF_TOP largest, sorted high to low
            int k = CF_TOP - 1;
            while (k > 0 && diff > tv[k - 1]) { tv[k] = tv[k - 1]; ti[k] = ti[k - 1]; --k; }
            tv[k] = diff;
            ti[k] = i;
        }
    }
    const u64 bad_total = cf_block_sum<u64>(bad_count, shared_count);
    const u64 nonfinite_total = cf_block_sum<u64>(nonfinite, shared_count);
    const u64 rel_nan_total = cf_block_sum<u64>((u64)rel_nan, shared_count);
    for (int o = 16; o > 0; o >>= 1) {
        max_abs = fmaxf(max_abs, __shfl_down_sync(0xffffffffu, max_abs, o));
        max_rel = fmaxf(max_rel, __shfl_down_sync(0xffffffffu, max_rel, o));
    }
    for (int k = 0; k < CF_TOP; ++k) {
        shared_val[threadIdx.x * CF_TOP + k] = tv[k];
        shared_idx[threadIdx.x * CF_TOP + k] = ti[k];
    }
    __shared__ float warp_abs[CF_THREADS / 32], warp_rel[CF_THREADS / 32];
    if ((threadIdx.x & 31) == 0) { warp_abs[threadIdx.x >> 5] = max_abs; warp_rel[threadIdx.x >> 5] = max_rel; }
    __syncthreads();
    if (threadIdx.x == 0) {
        float a = 0.f, r = 0.f;
        for (int w = 0; w < CF_THREADS / 32; ++w) { a = fmaxf(a, warp_abs[w]); r = fmaxf(r, warp_rel[w]); }
        double* row = stats + 4 * blockIdx.x;
        row[0] = (double)bad_total;
        row[1] = (double)nonfinite_total;
        row[2] = (double)a;
        row[3] = rel_nan_total ? __longlong_as_double(0x7ff8000000000000LL) : (double)r;
        // The block's CF_TOP largest: the largest CF_TOP among every thread's sorted lists.
        float bv[CF_TOP];
        i64 bi[CF_TOP];
        for (int k = 0; k < CF_TOP; ++k) { bv[k] = -1.f; bi[k] = -1; }
        for (int j = 0; j < CF_THREADS * CF_TOP; ++j) {
            const float v = shared_val[j];
            if (v > bv[CF_TOP - 1]) {
                int k = CF_TOP - 1;
                while (k > 0 && v > bv[k - 1]) { bv[k] = bv[k - 1]; bi[k] = bi[k - 1]; --k; }
                bv[k] = v;
                bi[k] = shared_idx[j];
            }
        }
        for (int k = 0; k < CF_TOP; ++k) {
            top_vals[CF_TOP * blockIdx.x + k] = bv[k];
            top_idx[CF_TOP * blockIdx.x + k] = bi[k];
        }
    }
}

extern "C" __global__ void cudaforge_check_compare_f32(const float* e, const float* g, i64 n, float atol, float rtol,
                                                       double* stats, float* top_vals, i64* top_idx)
{
    cf_compare<float>(e, g, 0, n, atol, rtol, stats, top_vals, top_idx);
}

extern "C" __global__ void cudaforge_check_compare_half(const unsigned short* e, const unsigned short* g, int kind,
                                                        i64 n, float atol, float rtol, double* stats,
                                                        float* top_vals, i64* top_idx)
{
    cf_compare<unsigned short>(e, g, kind, n, atol, rtol, stats, top_vals, top_idx);
}

// integrity/runtime.py FixedValueProbe.add: per block max(e - tol), min(e + tol) and whether every value
// is finite, with tol = |e| * rtol + atol in float64.
extern "C" __global__ void cudaforge_check_fixed_bounds(const void* __restrict__ data, int kind, i64 n,
                                                        double atol, double rtol, double* __restrict__ rows)
{
    __shared__ double lo_s[CF_THREADS / 32], hi_s[CF_THREADS / 32];
    __shared__ int fin_s[CF_THREADS / 32];
    double lo = -__longlong_as_double(0x7ff0000000000000LL), hi = __longlong_as_double(0x7ff0000000000000LL);
    int finite = 1;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        double v;
        if (kind == 0) v = (double)((const float*)data)[i];
        else if (kind == 3) v = ((const double*)data)[i];
        else v = (double)cf_load((const unsigned short*)data, i, kind);
        if (!isfinite(v)) { finite = 0; continue; }
        const double tol = __dadd_rn(__dmul_rn(fabs(v), rtol), atol);
        lo = fmax(lo, __dsub_rn(v, tol));
        hi = fmin(hi, __dadd_rn(v, tol));
    }
    for (int o = 16; o > 0; o >>= 1) {
        lo = fmax(lo, __shfl_down_sync(0xffffffffu, lo, o));
        hi = fmin(hi, __shfl_down_sync(0xffffffffu, hi, o));
        finite = min(finite, __shfl_down_sync(0xffffffffu, finite, o));
    }
    if ((threadIdx.x & 31) == 0) { lo_s[threadIdx.x >> 5] = lo; hi_s[threadIdx.x >> 5] = hi; fin_s[threadIdx.x >> 5] = finite; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 0; w < CF_THREADS / 32; ++w) { lo = fmax(lo, lo_s[w]); hi = fmin(hi, hi_s[w]); finite = min(finite, fin_s[w]); }
        rows[3 * blockIdx.x] = lo;
        rows[3 * blockIdx.x + 1] = hi;
        rows[3 * blockIdx.x + 2] = (double)finite;
    }
}
"""

_NAMES = ("cudaforge_check_word_sums", "cudaforge_check_compare_f32", "cudaforge_check_compare_half",
          "cudaforge_check_fixed_bounds")


@dataclass
class _Loaded:
    functions: dict[str, Any]
    blocks: int  # grid size: a few blocks per SM, the rest by grid stride


_STATE: dict[int, _Loaded] = {}  # device index -> its loaded kernels
UNAVAILABLE: dict[str, str] = {}  # "why" -> the first reason the kernels could not be used (fallback for good)


def _load(device_index: int) -> _Loaded | None:
    """The kernels on this device, compiled (NVRTC, disk-cached like a candidate's) and loaded once."""
    loaded = _STATE.get(device_index)
    if loaded is not None:
        return loaded
    if UNAVAILABLE:
        return None
    try:
        import torch
        from cudaforge.engine import nvrtc

        with nvrtc.uncounted_compiles():  # the build's cache statistics are the candidate's
            major, minor = torch.cuda.get_device_capability(device_index)
            binary, _ = nvrtc._compile(_SOURCE, _NAMES[0], (), f"{major}{minor}")  # one module, all four
        _, functions = nvrtc.load_module(binary, _NAMES, device_index, "the check kernels")  # extern "C" names
        sms = torch.cuda.get_device_properties(device_index).multi_processor_count
        loaded = _Loaded(functions=functions, blocks=max(1, 4 * sms))
    except Exception as exc:  # no NVRTC, no driver, a compile error: the PyTorch forms do the work
        UNAVAILABLE["why"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        return None
    _STATE[device_index] = loaded
    return loaded


def prepare(device: Any) -> bool:
    """Compile and load the kernels now (a spare's warm-up), so no check pays for it; False when they
    cannot be used here."""
    return getattr(device, "type", device) == "cuda" and _load(_index(device)) is not None


def _index(device: Any) -> int:
    import torch

    index = getattr(device, "index", None)
    return torch.cuda.current_device() if index is None else int(index)


def _launch(loaded: _Loaded, name: str, fmt: str, values: tuple[Any, ...], stream: int) -> None:
    """cuLaunchKernel straight through the driver (not nvrtc.Kernel: no launch is counted as the
    candidate's); `fmt` packs the arguments (struct codes, native alignment per argument)."""
    from cudaforge.engine import nvrtc

    buffers = [ctypes.create_string_buffer(struct.pack("=" + code, value)) for code, value in zip(fmt, values, strict=True)]
    pointers = (ctypes.c_void_p * len(buffers))(*[ctypes.cast(b, ctypes.c_void_p) for b in buffers])
    nvrtc._check(nvrtc._launch()(loaded.functions[name], loaded.blocks, 1, 1, THREADS, 1, 1, 0, stream, pointers, None),
                 f"launching {name}")


def _usable(*tensors: Any) -> _Loaded | None:
    first = tensors[0]
    if first.device.type != "cuda" or any(t.device != first.device for t in tensors):
        return None
    return _load(_index(first.device))


def _stream(device: Any) -> int:
    import torch

    return int(torch.cuda.current_stream(device).cuda_stream)


def word_sums(raw: Any, key: tuple[int, int]) -> tuple[int, int] | None:
    """observe.word_sums for a flat contiguous int32 tensor on a GPU in one launch, `key` the weights'
    (scale, shift); None where the kernels cannot be used (the caller's PyTorch form then)."""
    queued = word_sums_queued(raw, key)
    if queued is None:
        return None
    plain, weighted = queued.tolist()  # int64 sums wrap modulo 2**64, as the kernel's do
    return int(plain), int(weighted)


def word_sums_queued(raw: Any, key: tuple[int, int]) -> Any | None:
    """word_sums' two sums as a 2-element int64 tensor on the device, queued and not waited for (the caller
    reads many at once: observe.fingerprints); None where the kernels cannot be used."""
    import torch

    if raw.dtype != torch.int32 or not raw.is_contiguous():
        return None
    loaded = _usable(raw)
    if loaded is None:
        return None
    rows = torch.empty((loaded.blocks, 2), dtype=torch.int64, device=raw.device)
    scale, shift = key
    _launch(loaded, "cudaforge_check_word_sums", "QqqqqQ",
            (raw.data_ptr(), raw.numel(), scale, shift, 0, rows.data_ptr()), _stream(raw.device))
    return rows.sum(dim=0)


_HALF_KINDS = {"float16": 1, "bfloat16": 2}


def compare_stats(e: Any, g: Any, atol: float, rtol: float) -> tuple[Any, Any, Any] | None:
    """compare.py's statistics of two flat contiguous float tensors of one dtype on one GPU, in one pass:
    (stats [mismatches, non-finite in got, max abs err, max rel err] float64 on the device, the TOP
    largest abs errors, their flat indices) or None where the kernels do not apply."""
    import torch

    if e.dtype != g.dtype or e.dtype not in (torch.float32, torch.float16, torch.bfloat16) \
            or not (e.is_contiguous() and g.is_contiguous()) or e.numel() != g.numel():
        return None
    loaded = _usable(e, g)
    if loaded is None:
        return None
    blocks = loaded.blocks
    stats = torch.empty((blocks, 4), dtype=torch.float64, device=e.device)
    top_vals = torch.empty(blocks * TOP, dtype=torch.float32, device=e.device)
    top_idx = torch.empty(blocks * TOP, dtype=torch.int64, device=e.device)
    stream = _stream(e.device)
    if e.dtype == torch.float32:
        _launch(loaded, "cudaforge_check_compare_f32", "QQqffQQQ",
                (e.data_ptr(), g.data_ptr(), e.numel(), atol, rtol, stats.data_ptr(), top_vals.data_ptr(),
                 top_idx.data_ptr()), stream)
    else:
        kind = _HALF_KINDS[str(e.dtype).replace("torch.", "")]
        _launch(loaded, "cudaforge_check_compare_half", "QQiqffQQQ",
                (e.data_ptr(), g.data_ptr(), kind, e.numel(), atol, rtol, stats.data_ptr(), top_vals.data_ptr(),
                 top_idx.data_ptr()), stream)
    total = torch.stack([stats[:, 0].sum(), stats[:, 1].sum(), stats[:, 2].max(), stats[:, 3].max()])
    return total, top_vals, top_idx


_FIXED_KINDS = {"float32": 0, "float16": 1, "bfloat16": 2, "float64": 3}


def fixed_bounds(flat: Any, atol: float, rtol: float) -> Any | None:
    """FixedValueProbe's [max(e - tol), min(e + tol), all finite] (float64, on the device) of a flat
    contiguous float tensor on a GPU in one pass; None where the kernels do not apply."""
    import torch

    kind = _FIXED_KINDS.get(str(flat.dtype).replace("torch.", ""))
    if kind is None or not flat.is_contiguous():
        return None
    loaded = _usable(flat)
    if loaded is None:
        return None
    rows = torch.empty((loaded.blocks, 3), dtype=torch.float64, device=flat.device)
    _launch(loaded, "cudaforge_check_fixed_bounds", "QiqddQ",
            (flat.data_ptr(), kind, flat.numel(), atol, rtol, rows.data_ptr()), _stream(flat.device))
    return torch.stack([rows[:, 0].max(), rows[:, 1].min(), rows[:, 2].min()])
