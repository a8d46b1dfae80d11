"""Triton candidate for layernorm: one program per row, the row held in registers; mean, then the
variance of the centred values (two passes over registers, one read of DRAM), then weight and bias."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

EPS = 1e-5


@triton.jit
def cf_layernorm_rows(x_ptr, w_ptr, b_ptr, y_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / cols
    centred = tl.where(mask, x - mean, 0.0)
    var = tl.sum(centred * centred, axis=0) / cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + row * cols + offs, centred * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.ln = nn.LayerNorm(hidden, eps=EPS)  # holds ln.weight and ln.bias; forward uses our kernel

    def forward(self, x):
        x = x.contiguous()
        w = self.ln.weight.detach().contiguous()
        b = self.ln.bias.detach().contiguous()
        y = torch.empty_like(x)
        if x.numel() == 0:
            return y
        cols = x.shape[-1]
        rows = x.numel() // cols
        block = triton.next_power_of_2(cols)
        warps = 4 if block <= 2048 else 8 if block <= 4096 else 16
        cf_layernorm_rows[(rows,)](x, w, b, y, cols, float(self.ln.eps), BLOCK=block, num_warps=warps)
        return y
