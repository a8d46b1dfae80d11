"""Row softmax over the last dimension of a (4096, 8192) fp32 matrix (128 MiB read, 128 MiB written)."""
import torch
import torch.nn as nn

BATCH = 4096
DIM = 8192


class Model(nn.Module):
    """y[i, :] = exp(x[i, :]) / sum(exp(x[i, :]))."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    # Logits spread wider than plain randn, so the largest probabilities sit well above the
    # absolute tolerance and are really checked.
    return [torch.randn(BATCH, DIM) * 4.0]


def get_init_inputs():
    return []
