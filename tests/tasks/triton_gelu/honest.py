"""An honest Triton candidate: one fused kernel (autotuned between two block sizes) does all the work."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 512})], key=["n"])
@triton.jit
def gelu_scale_bias(x_ptr, b_ptr, y_ptr, n, cols, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs % cols, mask=mask, other=0.0)
    y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offs, y * scale + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, cols: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.zeros(cols))

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        gelu_scale_bias[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, self.bias, y, n, x.shape[-1], self.scale)
        return y
