"""ReLU over a large fp32 tensor: the simplest memory-bound task (128 MiB read, 128 MiB written)."""
import torch
import torch.nn as nn

BATCH = 8192
DIM = 4096


class Model(nn.Module):
    """y = max(x, 0), elementwise."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
