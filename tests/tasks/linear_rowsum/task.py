"""Tiny CI task: an nn.Linear (init args, parameters linear.weight and linear.bias) whose forward returns
a tuple of two tensors: the activations and their per-row sums."""

import torch
import torch.nn as nn

BATCH = 8
IN_FEATURES = 32
OUT_FEATURES = 24


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = self.linear(x)
        return y, y.sum(dim=-1)


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
