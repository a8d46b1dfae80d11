"""The task's own forward as the candidate: correct, and refused only for having no kernel of its own."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.tanh(x)
