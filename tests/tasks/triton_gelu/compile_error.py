"""A Triton candidate whose kernel does not compile: tl.arange needs a power-of-two range."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gelu_scale_bias(x_ptr, b_ptr, y_ptr, n, cols, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, 300)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs % cols, mask=mask, other=0.0)
    tl.store(y_ptr + offs, (0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))) * scale + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, cols: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.zeros(cols))

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        gelu_scale_bias[(triton.cdiv(n, 256),)](x, self.bias, y, n, x.shape[-1], self.scale, BLOCK=256)
        return y
