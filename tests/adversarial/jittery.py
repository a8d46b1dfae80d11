"""Honest numbers, disturbed time: every other call or so waits 3 ms, as on a loaded machine or a shared,
throttling card. A lucky window would make any speedup; the spread says the timing is no result
(noisy_timing), so it is never best and never fast."""
# @include _ext.py
import random
import time


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(cols))

    def forward(self, x):
        if random.random() < 0.5:
            time.sleep(0.003)
        return _ext.relu_scale_bias(x.contiguous(), self.bias.contiguous(), 2.0, float("inf"))
