"""Broken on purpose (CPU, relu task): the C++ code writes through a null pointer, so the worker process
dies with SIGSEGV inside native code; the evaluator must report a crash with the signal, not hang."""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SRC = r'''
#include <cstdint>

torch::Tensor relu_cpu(torch::Tensor x)
{
    TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "relu_cpu: expected contiguous float32");
    auto y = torch::empty_like(x);
    const float* xp = x.data_ptr<float>();
    // bug: the output pointer is taken from a zero address instead of y. The volatile read keeps the
    // compiler from seeing the null, so the first store really faults (SIGSEGV).
    volatile uintptr_t out_addr = 0;
    float* yp = reinterpret_cast<float*>(out_addr);
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) yp[i] = xp[i] < 0.f ? 0.f : xp[i];
    return y;
}
'''

_ext = load_inline(
    name="cf_broken_crash_cpu",
    cpp_sources=CPP_SRC,
    functions=["relu_cpu"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.relu_cpu(x.contiguous())
