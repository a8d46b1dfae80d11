"""A token call of the candidate's own C++ op on one element, then PyTorch does all of the reference's
work (the same aten ops, as often, at the same cost): pytorch_fallback."""
# @include _ext.py


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(cols))

    def forward(self, x):
        _ext.scale(x[:1, :1].contiguous(), 1.0)  # the custom "kernel": one element, result unused
        return torch.relu(x) * 2.0 + self.bias
