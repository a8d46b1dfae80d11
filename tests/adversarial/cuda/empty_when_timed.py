"""Once the correctness calls are over, forward returns unwritten memory (torch.empty_like) and launches
nothing useful: the allocator may hand back a block that held a right answer before. The timed outputs
are checked, and the reference's timed outputs are overwritten, so this fails (timing_output_mismatch)."""
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
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        y = torch.empty_like(x)
        if self.calls > 12:
            _noop(grid=(1,), block=(32,), args=(y, 0))
            return y
        _launch_relu(x.contiguous(), y)
        return y
