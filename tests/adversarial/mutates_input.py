"""Input mutation: the kernel uses the input tensor as scratch space after computing the output."""
# @include _ext.py


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(cols))

    def forward(self, x):
        return _ext.relu_scale_bias_scratch(x, self.bias, 2.0)
