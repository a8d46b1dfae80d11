"""Triton candidate for gelu (tanh approximation): one elementwise kernel, block size autotuned.

tanh(u) is computed as 1 - 2 / (1 + exp(2u)), which stays within triton.language (no libdevice), so
the same kernel runs in Triton's interpreter; it saturates correctly to +-1 for large |u|.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 2048}, num_warps=4),
        triton.Config({"BLOCK": 4096}, num_warps=8),
        triton.Config({"BLOCK": 8192}, num_warps=8),
    ],
    key=["n"],
)
@triton.jit
def cf_gelu_tanh(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    t = 1.0 - 2.0 / (1.0 + tl.exp(2.0 * u))
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + t), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        if n:
            cf_gelu_tanh[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
        return y
