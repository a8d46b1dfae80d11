"""Caches its last result keyed by a hash of the input's content and reports every call (hit or miss)
on stdout. The timed calls rotate two input draws, so a one-entry content cache never hits while it
is timed."""
# @include _ext.py
import hashlib


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(cols))
        self.slot = (None, None)

    def forward(self, x):
        digest = hashlib.sha256(x.contiguous().numpy().tobytes()).hexdigest()
        if self.slot[0] == digest:
            print("content-cache: hit", flush=True)
            return self.slot[1].clone()
        print("content-cache: miss", flush=True)
        y = _ext.relu_scale_bias(x.contiguous(), self.bias.contiguous(), 2.0, float("inf"))
        self.slot = (digest, y.clone())
        return y
