"""A result cache the static check cannot see (the key is fetched by a computed attribute name), keyed
on the input's memory address and validated by one sampled element, so every correctness trial (new
values) misses it and passes, while timing (the same tensor again and again) always hits it.
Caught only at run time: new values written into the same memory, mostly away from the sample."""
# @include _ext.py

_ADDRESS = "data_" + "ptr"


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(cols))
        self.memo = {}

    def forward(self, x):
        where = getattr(x, _ADDRESS)()
        probe = float(x.reshape(-1)[0])
        hit = self.memo.get(where)
        if hit is not None and hit[0] == probe:
            return hit[1]
        y = _ext.relu_scale_bias(x.contiguous(), self.bias, 2.0, float("inf"))
        self.memo[where] = (probe, y)
        return y
