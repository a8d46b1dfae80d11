"""Honest: keeps cuBLAS for the GEMM (torch.matmul, no bias) and fuses bias + ReLU into its own NVRTC
kernel. The reference's bias/ReLU kernels are replaced, so this is not pytorch_fallback: accepted."""
import torch
import torch.nn as nn

from cudaforge.engine.nvrtc import load_kernel

SOURCE = r"""
extern "C" __global__ void cf_adv_bias_relu(float* __restrict__ y, const float* __restrict__ b, long long n, int cols)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = y[i] + b[i % cols];
        y[i] = v < 0.f ? 0.f : v;
    }
}
"""

_bias_relu = load_kernel(SOURCE, "cf_adv_bias_relu")


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = torch.matmul(x.contiguous(), self.linear.weight.t())
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        _bias_relu(grid=(sms * 8,), block=(256,), args=(y, self.linear.bias, y.numel(), y.shape[1]))
        return y
