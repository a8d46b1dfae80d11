"""Tiny CI task for Triton candidates (run by Triton's interpreter on the CPU): y = gelu(x) * scale + bias."""

import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 8
COLS = 300  # not a power of two: masks are exercised
SCALE = 1.5


class Model(nn.Module):
    def __init__(self, cols: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.linspace(-1.0, 1.0, cols))

    def forward(self, x):
        return F.gelu(x) * self.scale + self.bias


def get_inputs():
    return [torch.randn(ROWS, COLS) * 2.0]


def get_init_inputs():
    return [COLS, SCALE]
