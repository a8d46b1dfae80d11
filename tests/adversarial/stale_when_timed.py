"""Correct for the first calls (correctness trials and probes), then returns zeros: whatever it returns
while it is timed is never right (timing_output_mismatch)."""
# @include _ext.py


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(cols))
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls > 12:
            return _ext.zeros(x.contiguous())
        return _ext.relu_scale_bias(x.contiguous(), self.bias.contiguous(), 2.0, float("inf"))
