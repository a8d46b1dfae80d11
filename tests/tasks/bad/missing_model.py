"""Bad task on purpose: the module is called Net, so there is no `Model` class to load."""

import torch
import torch.nn as nn

SIZE = 64


class Net(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(SIZE)]


def get_init_inputs():
    return []
