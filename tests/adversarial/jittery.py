"""Honest numbers, disturbed time: every other call waits 3 ms, as on a loaded machine or a shared,
throttling card. A lucky window would make any speedup; the spread says the timing is no result
(noisy_timing), so it is never best and never fast. Alternating, not random: any window of consecutive
calls is half slow, so every measurement is disturbed (a random half left about one window in seven
quiet by chance, and the test that expects two noisy measurements failed in CI)."""
# @include _ext.py
import time


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(cols))
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls % 2:
            time.sleep(0.003)
        return _ext.relu_scale_bias(x.contiguous(), self.bias.contiguous(), 2.0, float("inf"))
