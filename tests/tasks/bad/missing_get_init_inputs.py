"""Bad task on purpose: there is no get_init_inputs function."""

import torch
import torch.nn as nn

SIZE = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(SIZE)]
