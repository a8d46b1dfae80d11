"""Triton candidate for softmax: one program per row, the whole row held in registers, so each element
is read from DRAM once and written once (max, exp and sum in one pass over the registers)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def cf_softmax_rows(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    e = tl.where(mask, e, 0.0)
    tl.store(y_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        if x.numel() == 0:
            return y
        cols = x.shape[-1]
        rows = x.numel() // cols
        block = triton.next_power_of_2(cols)
        warps = 4 if block <= 2048 else 8 if block <= 4096 else 16
        cf_softmax_rows[(rows,)](x, y, cols, BLOCK=block, num_warps=warps)
        return y
