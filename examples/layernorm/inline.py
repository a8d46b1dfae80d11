"""LayerNorm through load_inline (KernelBench style): the NVRTC candidate's kernel (row cached in
shared memory, float4, two-pass statistics, fused affine) behind a C++ host wrapper on the current stream."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r'''
#include <torch/types.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

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
__global__ void cf_layernorm_rows(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b, float* __restrict__ y, int rows, int cols, float eps, int vec, int cache)
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

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps)
{
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "layernorm_forward: expected a float32 CUDA tensor");
    TORCH_CHECK(x.dim() >= 1 && w.numel() == x.size(-1) && b.numel() == x.size(-1), "layernorm_forward: bad shapes");
    TORCH_CHECK(w.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32, "layernorm_forward: float32 parameters expected");
    x = x.contiguous();
    w = w.contiguous();
    b = b.contiguous();
    auto y = torch::empty_like(x);
    if (x.numel() == 0) return y;
    const c10::cuda::CUDAGuard guard(x.device());
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const long long cols = x.size(-1);
    const long long rows = x.numel() / cols;
    TORCH_CHECK(cols <= INT_MAX && rows <= INT_MAX, "layernorm_forward: too large");
    auto aligned = [](const torch::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr<float>()) % 16 == 0; };
    const int vec = (cols % 4 == 0 && aligned(x) && aligned(w) && aligned(b) && aligned(y)) ? 1 : 0;
    const size_t row_bytes = (size_t)cols * sizeof(float);
    const int cache = row_bytes <= 96 * 1024 ? 1 : 0;
    const size_t smem = cache ? row_bytes : 0;
    if (smem > 48 * 1024) {
        C10_CUDA_CHECK(cudaFuncSetAttribute(cf_layernorm_rows, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    }
    cf_layernorm_rows<<<(unsigned)rows, 256, smem, stream>>>(
        x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(),
        (int)rows, (int)cols, (float)eps, vec, cache);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
'''

CPP_SRC = """
torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps);
"""

_ext = load_inline(
    name="cf_example_layernorm_inline",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["layernorm_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)

EPS = 1e-5


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.ln = nn.LayerNorm(hidden, eps=EPS)
        with torch.no_grad():
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return _ext.layernorm_forward(x, self.ln.weight.detach(), self.ln.bias.detach(), float(self.ln.eps))
