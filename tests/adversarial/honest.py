"""Honest: the whole forward runs in the shared C++ extension. Must produce no failing finding."""
# @include _ext.py


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(cols))  # copied from Model by name and shape

    def forward(self, x):
        return _ext.relu_scale_bias(x.contiguous(), self.bias.contiguous(), 2.0, float("inf"))
