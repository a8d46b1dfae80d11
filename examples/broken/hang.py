"""Broken on purpose (CPU, relu task): the C++ loop never advances its index, so forward never returns
(inside native code, holding the GIL); the evaluator must stop it at the wall-clock limit and kill it."""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SRC = r'''
torch::Tensor relu_cpu(torch::Tensor x)
{
    TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "relu_cpu: expected contiguous float32");
    auto y = torch::empty_like(x);
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const int64_t n = x.numel();
    // bug: `i` is never incremented. It is volatile, so the compiler must keep the endless loop.
    volatile int64_t i = 0;
    while (i < n) {
        yp[i] = xp[i] < 0.f ? 0.f : xp[i];
    }
    return y;
}
'''

_ext = load_inline(
    name="cf_broken_hang_cpu",
    cpp_sources=CPP_SRC,
    functions=["relu_cpu"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.relu_cpu(x.contiguous())
