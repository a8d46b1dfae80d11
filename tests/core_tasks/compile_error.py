"""A C++ syntax error: the build fails and the compiler log must be shown."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SOURCE = r"""
#include <torch/extension.h>
torch::Tensor broken(torch::Tensor x) {
  return x * 2   // missing semicolon
}
"""
_ext = load_inline(name="cf_ci_broken", cpp_sources=_SOURCE, functions=["broken"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()

    def forward(self, x):
        return _ext.broken(x)
