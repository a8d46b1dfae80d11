"""Computes in place into the input and returns a view of it (no output allocation at all)."""
# @include _ext.py


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(cols))

    def forward(self, x):
        return _ext.relu_scale_bias_inplace(x, self.bias, 2.0).view(x.shape)
