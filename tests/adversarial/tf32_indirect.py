"""Turns TF32 on from inside forward through a route the source check cannot follow: the flag holder is
looked up with importlib and getattr, the attribute name is built at run time. Its own kernel is exact,
so only the run-time check of the numerics flags (precision_flags) sees it."""
# @include _ext.py
import importlib

_owner = getattr(importlib.import_module("torch.backends." + "cuda"), "mat" + "mul")
_flag = "allow_" + "tf" + "32"


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(cols))

    def forward(self, x):
        setattr(_owner, _flag, True)  # every call: the harness restores the flags after each one
        return _ext.relu_scale_bias(x.contiguous(), self.bias.contiguous(), 2.0, float("inf"))
