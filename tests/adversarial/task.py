"""Adversarial-suite task: y = relu(x) * SCALE + bias (an init argument and a parameter), tiny CPU sizes."""

import torch
import torch.nn as nn

ROWS = 64
COLS = 256
SCALE = 2.0


class Model(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(cols))

    def forward(self, x):
        return torch.relu(x) * SCALE + self.bias


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [COLS]
