"""Honest: keeps PyTorch's relu (a library op) and does the rest (scale and bias) in its own C++ op.
The reference's mul and add are replaced, so this is not pytorch_fallback: must be accepted."""
# @include _ext.py


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(cols))

    def forward(self, x):
        r = torch.relu(x).contiguous()
        return _ext.relu_scale_bias(r, self.bias.contiguous(), 2.0, float("inf"))
