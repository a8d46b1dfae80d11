"""Correct C++ candidate for the CI task."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SOURCE = r"""
#include <torch/extension.h>
torch::Tensor relu_scale_bias(torch::Tensor x, torch::Tensor bias, double scale, double offset) {
  TORCH_CHECK(x.is_contiguous() && bias.is_contiguous(), "contiguous inputs expected");
  auto y = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const float* bp = bias.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t cols = bias.numel();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) {
    float v = xp[i] > 0.f ? xp[i] : 0.f;
    yp[i] = v * (float)scale + bp[i % cols] + (float)offset;
  }
  return y;
}
"""
_ext = load_inline(
    name="cf_ci_relu_scale_bias", cpp_sources=_SOURCE, functions=["relu_scale_bias"], verbose=False
)


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(cols))  # values are copied from Model by name and shape

    def forward(self, x):
        return _ext.relu_scale_bias(x.contiguous(), self.bias.contiguous(), 0.5, 0.0)
