"""Bad task on purpose: Model.__init__ raises ValueError for the init args that get_init_inputs gives."""

import torch
import torch.nn as nn

HIDDEN = 63


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        if hidden % 2:
            raise ValueError(f"hidden must be even, got {hidden}")
        self.linear = nn.Linear(hidden, hidden)

    def forward(self, x):
        return self.linear(x)


def get_inputs():
    return [torch.randn(4, HIDDEN)]


def get_init_inputs():
    return [HIDDEN]
