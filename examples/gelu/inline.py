"""GELU-tanh through load_inline (KernelBench style): float4 grid-stride kernel on the current stream."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r'''
#include <torch/types.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

__device__ __forceinline__ float cf_gelu1(float v)
{
    const float k_beta = 0.7978845608028654f;   // sqrt(2 / pi)
    const float k_kappa = 0.044715f;
    const float inner = k_beta * (v + k_kappa * v * v * v);
    return 0.5f * v * (1.0f + tanhf(inner));
}

__global__ void gelu_vec4_kernel(const float* __restrict__ x, float* __restrict__ y, long long n)
{
    const long long n4 = n >> 2;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (long long i = tid; i < n4; i += stride) {
        float4 v = x4[i];
        v.x = cf_gelu1(v.x);
        v.y = cf_gelu1(v.y);
        v.z = cf_gelu1(v.z);
        v.w = cf_gelu1(v.w);
        y4[i] = v;
    }
    const long long t = (n4 << 2) + tid;
    if (t < n) y[t] = cf_gelu1(x[t]);
}

__global__ void gelu_scalar_kernel(const float* __restrict__ x, float* __restrict__ y, long long n)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = cf_gelu1(x[i]);
    }
}

torch::Tensor gelu_forward(torch::Tensor x)
{
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "gelu_forward: expected a float32 CUDA tensor");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const long long n = x.numel();
    if (n == 0) return y;
    const c10::cuda::CUDAGuard guard(x.device());
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, x.get_device());
    if (sms < 1) sms = 1;
    const int threads = 256;
    const bool aligned = reinterpret_cast<uintptr_t>(x.data_ptr<float>()) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0;
    const long long work = aligned ? n / 4 : n;
    long long blocks = (work + threads - 1) / threads;
    if (blocks > (long long)sms * 8) blocks = (long long)sms * 8;
    if (blocks < 1) blocks = 1;
    if (aligned) {
        gelu_vec4_kernel<<<(unsigned)blocks, threads, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    } else {
        gelu_scalar_kernel<<<(unsigned)blocks, threads, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
'''

CPP_SRC = "torch::Tensor gelu_forward(torch::Tensor x);"

_ext = load_inline(
    name="cf_example_gelu_inline",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["gelu_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.gelu_forward(x)
