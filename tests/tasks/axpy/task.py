"""Tiny CI task: out = alpha * x + y, with alpha passed to forward as a plain Python float."""

import torch
import torch.nn as nn

ROWS = 16
COLS = 33
ALPHA = 0.75


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y, alpha):
        return alpha * x + y


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randn(ROWS, COLS), ALPHA]


def get_init_inputs():
    return []
