"""The task's layers in an nn.Sequential: no parameter name matches the reference's, so its output is right
only if its construction draws (or is given) the reference's weights."""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features, hidden):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, features))

    def forward(self, x):
        return self.layers(x)
