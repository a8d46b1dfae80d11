"""LayerNorm through NVRTC: one 256-thread block per row, the row cached in shared memory (one DRAM read),
float4 accesses, two-pass mean/variance with warp-shuffle block reductions, fused affine."""
import torch
import torch.nn as nn

from cudaforge.engine.nvrtc import load_kernel

EPS = 1e-5

SOURCE = r'''
__device__ __forceinline__ float cf_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block-wide sum; blockDim.x must be a multiple of 32. Every thread gets the result.
// The leading barrier protects red[] from a previous reduction that other warps may still read.
__device__ float cf_block_sum(float v, float* red)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = cf_warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < nwarps ? red[lane] : 0.0f;
    return cf_warp_sum(v);
}

// One block per row. vec != 0: cols % 4 == 0 and x, w, b, y 16-byte aligned. cache != 0: dynamic
// shared memory holds the row (cols floats). Each thread touches the same indices in every pass,
// so the cached row needs no extra barrier.
extern "C" __global__ void cf_layernorm_rows(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b, float* __restrict__ y, int rows, int cols, float eps, int vec, int cache)
{
    extern __shared__ float4 cf_row4[];
    __shared__ float cf_red[32];
    const int row = blockIdx.x;
    if (row >= rows) return;
    const float* xr = x + (long long)row * cols;
    float* yr = y + (long long)row * cols;
    float* srow = reinterpret_cast<float*>(cf_row4);
    const int c4 = cols >> 2;

    // Pass 1: mean (and fill the cache).
    float s = 0.0f;
    if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        for (int i = threadIdx.x; i < c4; i += blockDim.x) {
            const float4 v = x4[i];
            if (cache) cf_row4[i] = v;
            s += (v.x + v.y) + (v.z + v.w);
        }
    } else {
        for (int i = threadIdx.x; i < cols; i += blockDim.x) {
            const float v = xr[i];
            if (cache) srow[i] = v;
            s += v;
        }
    }
    const float mean = cf_block_sum(s, cf_red) / (float)cols;

    // Pass 2: biased variance from squared deviations (stable, unlike E[x^2] - mean^2).
    const float* src = cache ? srow : xr;
    float q = 0.0f;
    if (vec) {
        const float4* s4 = reinterpret_cast<const float4*>(src);
        for (int i = threadIdx.x; i < c4; i += blockDim.x) {
            const float4 v = s4[i];
            const float dx = v.x - mean, dy = v.y - mean, dz = v.z - mean, dw = v.w - mean;
            q += (dx * dx + dy * dy) + (dz * dz + dw * dw);
        }
    } else {
        for (int i = threadIdx.x; i < cols; i += blockDim.x) {
            const float d = src[i] - mean;
            q += d * d;
        }
    }
    const float rstd = rsqrtf(cf_block_sum(q, cf_red) / (float)cols + eps);

    // Pass 3: normalise, scale, shift.
    if (vec) {
        const float4* s4 = reinterpret_cast<const float4*>(src);
        const float4* w4 = reinterpret_cast<const float4*>(w);
        const float4* b4 = reinterpret_cast<const float4*>(b);
        float4* y4 = reinterpret_cast<float4*>(yr);
        for (int i = threadIdx.x; i < c4; i += blockDim.x) {
            const float4 v = s4[i], g = w4[i], h = b4[i];
            y4[i] = make_float4((v.x - mean) * rstd * g.x + h.x, (v.y - mean) * rstd * g.y + h.y,
                                (v.z - mean) * rstd * g.z + h.z, (v.w - mean) * rstd * g.w + h.w);
        }
    } else {
        for (int i = threadIdx.x; i < cols; i += blockDim.x) yr[i] = (src[i] - mean) * rstd * w[i] + b[i];
    }
}
'''

_layernorm_rows = load_kernel(SOURCE, "cf_layernorm_rows")

THREADS = 256
CACHE_LIMIT = 96 * 1024  # bytes of dynamic shared memory for one cached row


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.ln = nn.LayerNorm(hidden, eps=EPS)
        with torch.no_grad():
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        x = x.contiguous()
        w = self.ln.weight.detach().contiguous()
        b = self.ln.bias.detach().contiguous()
        y = torch.empty_like(x)
        if x.numel() == 0:
            return y
        cols = x.shape[-1]
        rows = x.numel() // cols
        vec = int(cols % 4 == 0 and all(t.data_ptr() % 16 == 0 for t in (x, w, b, y)))
        row_bytes = cols * 4
        cache = int(row_bytes <= CACHE_LIMIT)
        _layernorm_rows(
            grid=(rows,),
            block=(THREADS,),
            args=(x, w, b, y, rows, cols, float(self.ln.eps), vec, cache),
            shared_mem=row_bytes if cache else 0,
        )
        return y
