"""Broken on purpose (CUDA, relu task): the NVRTC kernel source has a syntax error (a missing semicolon),
so load_kernel raises at import and the evaluator must report a compile error with NVRTC's log."""
import torch
import torch.nn as nn

from cudaforge.engine.nvrtc import load_kernel

SOURCE = r'''
extern "C" __global__ void cf_relu_broken(const float* __restrict__ x, float* __restrict__ y, long long n)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x
    if (i < n) y[i] = x[i] < 0.f ? 0.f : x[i];
}
'''

_relu = load_kernel(SOURCE, "cf_relu_broken")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _relu(grid=((n + 255) // 256,), block=(256,), args=(x, y, n))
        return y
