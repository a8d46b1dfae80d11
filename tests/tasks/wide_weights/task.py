"""CI task for the memory rule: weights that dominate (a 128 MiB projection matrix, a 256 KiB input), like
KernelBench's wide matmuls (level2/55: a 4 GiB weight); a second copy of the weights shows in the peak."""

import torch
import torch.nn as nn

BATCH = 16
IN_FEATURES = 4096
OUT_FEATURES = 8192


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.projection = nn.Parameter(torch.randn(out_features, in_features) / in_features ** 0.5)

    def forward(self, x):
        return torch.tanh(x @ self.projection.t())


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
