"""Bad task on purpose: get_inputs uses a size constant that the module never defines (NameError)."""

import torch
import torch.nn as nn

BATCH = 4


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(BATCH, DIM)]  # noqa: F821 - DIM is missing on purpose


def get_init_inputs():
    return []
