"""Honest candidate for the weak tiny task (y = x * 1e-6): warned about the task, never failed."""
# @include _ext.py


class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.scale(x.contiguous(), 1e-6)
