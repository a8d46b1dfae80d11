"""Broken on purpose (CUDA, relu task): after its ReLU work, thread 0 of block 0 waits for a flag in
device memory that nothing ever sets, so the kernel never finishes and the next synchronisation blocks
forever; the evaluator must stop the worker at the wall-clock limit and kill its process tree."""
import torch
import torch.nn as nn

from cudaforge.engine.nvrtc import load_kernel

SOURCE = r'''
extern "C" __global__ void cf_relu_wait_forever(const float* __restrict__ x, float* __restrict__ y, long long n, int* flag)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] < 0.f ? 0.f : x[i];
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        // bug: a hand-made "all blocks done" barrier that no block ever signals.
        volatile int* f = flag;
        while (*f == 0) {
        }
    }
}
'''

_relu = load_kernel(SOURCE, "cf_relu_wait_forever")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        flag = torch.zeros(1, dtype=torch.int32, device=x.device)
        _relu(grid=(max(1, (n + 255) // 256),), block=(256,), args=(x, y, n, flag))
        return y
