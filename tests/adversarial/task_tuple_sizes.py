"""The adversarial task in the `eval/` style: lower-case sizes bound by one tuple assignment."""

import torch
import torch.nn as nn

rows, cols = 64, 256
SCALE = 2.0


class Model(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(cols))

    def forward(self, x):
        return torch.relu(x) * SCALE + self.bias


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return [cols]
