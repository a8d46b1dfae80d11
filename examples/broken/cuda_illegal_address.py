"""Broken on purpose (CUDA, relu task): every store lands 2^47 bytes (128 TiB) past the output tensor,
far outside anything mapped, so the kernel faults with "an illegal memory access was encountered". The
CUDA context is unusable afterwards; the evaluator must report it from the worker and carry on."""
import torch
import torch.nn as nn

from cudaforge.engine.nvrtc import load_kernel

SOURCE = r'''
extern "C" __global__ void cf_relu_bad_offset(const float* __restrict__ x, float* __restrict__ y, long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float v = x[i];
        y[i + (1LL << 45)] = v < 0.f ? 0.f : v;   // bug: a huge bogus offset (2^45 floats)
    }
}
'''

_relu = load_kernel(SOURCE, "cf_relu_bad_offset")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        if n > 0:
            _relu(grid=((n + 255) // 256,), block=(256,), args=(x, y, n))
        return y
