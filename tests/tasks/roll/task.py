"""Tiny CI task: roll each row of x by `shift` places, with shift passed to forward as a Python int."""

import torch
import torch.nn as nn

ROWS = 8
COLS = 21
SHIFT = 5


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, shift):
        return torch.roll(x, shifts=shift, dims=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS), SHIFT]


def get_init_inputs():
    return []
