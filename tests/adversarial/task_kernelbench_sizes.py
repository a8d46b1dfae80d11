"""The adversarial task in KernelBench's style: lower-case, annotated size constants."""

import torch
import torch.nn as nn

batch_size = 64
dim: int = 256
SCALE = 2.0


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return torch.relu(x) * SCALE + self.bias


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
