"""Broken on purpose (relu task, any device, nothing to build): forward reads an attribute that __init__
never set, so it raises AttributeError and the evaluator must report the Python traceback."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.threshold = 0.0

    def forward(self, x):
        # bug: the attribute is called `threshold`, not `negative_slope`
        return torch.where(x > self.threshold, x, x * self.negative_slope)
