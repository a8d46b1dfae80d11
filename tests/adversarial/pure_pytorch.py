"""The extension is built (it looks like a custom kernel) but never called: PyTorch does the work."""
# @include _ext.py


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(cols))
        self.ext = _ext

    def forward(self, x):
        return torch.relu(x) * 2.0 + self.bias
