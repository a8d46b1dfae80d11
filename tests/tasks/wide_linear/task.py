"""CI task whose weights are large enough for the construction replay (engine/worker/init_replay.py): two
nn.Linear layers of 2 Mi weights each, sizes from module constants so the shape check builds smaller ones."""

import torch
import torch.nn as nn

FEATURES = 1024
HIDDEN = 2048


class Model(nn.Module):
    def __init__(self, features, hidden):
        super().__init__()
        self.up = nn.Linear(features, hidden)
        self.down = nn.Linear(hidden, features)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def get_inputs():
    return [torch.randn(16, FEATURES)]


def get_init_inputs():
    return [FEATURES, HIDDEN]
