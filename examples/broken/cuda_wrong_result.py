"""Broken on purpose (CUDA, relu task): compiles and runs, but computes a leaky ReLU (0.1 * x for x < 0)
instead of ReLU, so about half of the outputs are off by up to ~0.5 and the correctness check must fail."""
import torch
import torch.nn as nn

from cudaforge.engine.nvrtc import load_kernel

SOURCE = r'''
extern "C" __global__ void cf_relu_leaky_by_mistake(const float* __restrict__ x, float* __restrict__ y, long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float v = x[i];
        y[i] = v < 0.f ? 0.1f * v : v;   // bug: leaky slope where ReLU has 0
    }
}
'''

_relu = load_kernel(SOURCE, "cf_relu_leaky_by_mistake")


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
