"""LayerNorm over the last dimension of (8192, 4096) fp32 activations, with learned weight and bias."""
import torch
import torch.nn as nn

BATCH = 8192
HIDDEN = 4096
EPS = 1e-5


class Model(nn.Module):
    """y = (x - mean) / sqrt(var + eps) * weight + bias, per row (parameters: ln.weight, ln.bias)."""

    def __init__(self, hidden):
        super().__init__()
        self.ln = nn.LayerNorm(hidden, eps=EPS)
        # Non-trivial affine parameters, so a kernel that ignores them fails.
        with torch.no_grad():
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    return [torch.randn(BATCH, HIDDEN) * 2.0 + 1.0]


def get_init_inputs():
    return [HIDDEN]
