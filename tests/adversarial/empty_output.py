"""Result reuse: returns memory of the right shape without writing it, hoping the allocator hands back
the block that just held the reference's output. Caught: the reference output is poisoned before the
candidate runs (reference-first trials) and the order alternates -> wrong_result."""
# @include _ext.py


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()

    def forward(self, x):
        return _ext.empty_like_unwritten(x.contiguous())
