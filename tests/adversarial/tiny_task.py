"""A weak task: every output is below the fp32 tolerance (1e-4), so an all-zero tensor would pass."""

import torch
import torch.nn as nn

ROWS = 64
COLS = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 1e-6


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
