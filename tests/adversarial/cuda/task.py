"""GPU adversarial task: ReLU over 8192 x 4096 fp32 (128 MiB in, 128 MiB out): memory bound, long
enough (~60-100 µs on an H200) that work hidden on a side stream shows in the timings."""
import torch
import torch.nn as nn

BATCH = 8192
DIM = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
