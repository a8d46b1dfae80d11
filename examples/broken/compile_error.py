"""Broken on purpose (CPU, relu task): the C++ source has a syntax error (a missing semicolon), so the
load_inline build fails at import and the evaluator must report a compile error with the compiler log."""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SRC = r'''
torch::Tensor relu_cpu(torch::Tensor x)
{
    auto y = torch::empty_like(x)
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) yp[i] = xp[i] < 0.f ? 0.f : xp[i];
    return y;
}
'''

_ext = load_inline(
    name="cf_broken_compile_error_cpu",
    cpp_sources=CPP_SRC,
    functions=["relu_cpu"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.relu_cpu(x.contiguous())
