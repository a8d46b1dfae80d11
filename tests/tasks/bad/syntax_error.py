# Bad task on purpose: SyntaxError on line 14 (the `def forward` line has no colon).
"""A task file that does not parse."""

import torch
import torch.nn as nn

SIZE = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x)
        return torch.relu(x)


def get_inputs():
    return [torch.randn(SIZE)]


def get_init_inputs():
    return []
