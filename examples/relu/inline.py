"""ReLU through load_inline (KernelBench style): float4 grid-stride kernel on the current stream."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r'''
#include <torch/types.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

__device__ __forceinline__ float cf_relu1(float v) { return v < 0.f ? 0.f : v; }  // NaN passes through

__global__ void relu_vec4_kernel(const float* __restrict__ x, float* __restrict__ y, long long n)
{
    const long long n4 = n >> 2;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (long long i = tid; i < n4; i += stride) {
        float4 v = x4[i];
        v.x = cf_relu1(v.x);
        v.y = cf_relu1(v.y);
        v.z = cf_relu1(v.z);
        v.w = cf_relu1(v.w);
        y4[i] = v;
    }
    const long long t = (n4 << 2) + tid;
    if (t < n) y[t] = cf_relu1(x[t]);
}

__global__ void relu_scalar_kernel(const float* __restrict__ x, float* __restrict__ y, long long n)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = cf_relu1(x[i]);
    }
}

torch::Tensor relu_forward(torch::Tensor x)
{
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "relu_forward: expected a float32 CUDA tensor");
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
        relu_vec4_kernel<<<(unsigned)blocks, threads, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    } else {
        relu_scalar_kernel<<<(unsigned)blocks, threads, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
'''

CPP_SRC = "torch::Tensor relu_forward(torch::Tensor x);"

_ext = load_inline(
    name="cf_example_relu_inline",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["relu_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.relu_forward(x)
