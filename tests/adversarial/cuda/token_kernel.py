"""A token NVRTC kernel on one element of scratch memory, then torch.relu does the reference's work
(the same kernel, as often, at the same cost): pytorch_fallback."""
import torch
import torch.nn as nn

from cudaforge.engine.nvrtc import load_kernel

SOURCE = r"""
extern "C" __global__ void cf_adv_relu(const float* __restrict__ x, float* __restrict__ y, long long n)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = x[i];
        y[i] = v < 0.f ? 0.f : v;
    }
}

extern "C" __global__ void cf_adv_noop(float* y, long long n)
{
    if ((long long)threadIdx.x < n) y[threadIdx.x] = 0.f;
}
"""

_relu = load_kernel(SOURCE, "cf_adv_relu")
_noop = load_kernel(SOURCE, "cf_adv_noop")


def _launch_relu(x, y, stream=None):
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    blocks = max(1, min((x.numel() + 255) // 256, sms * 8))
    _relu(grid=(blocks,), block=(256,), args=(x, y, x.numel()), stream=stream)


class ModelNew(nn.Module):
    def forward(self, x):
        scratch = torch.empty(32, device=x.device)
        _noop(grid=(1,), block=(32,), args=(scratch, 1))
        return torch.relu(x)
