"""Bad task on purpose: get_inputs returns a bare tensor instead of a list of inputs."""

import torch
import torch.nn as nn

SIZE = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return torch.randn(SIZE)


def get_init_inputs():
    return []
