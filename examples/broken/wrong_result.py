"""Broken on purpose (CPU, relu task): compiles and runs, but computes a leaky ReLU (0.1 * x for x < 0)
instead of ReLU, so about half of the outputs are off by up to ~0.5 and the correctness check must fail."""
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
    for (int64_t i = 0; i < n; ++i) {
        const float v = xp[i];
        yp[i] = v < 0.f ? 0.1f * v : v;   // bug: leaky slope where ReLU has 0
    }
    return y;
}
'''

_ext = load_inline(
    name="cf_broken_wrong_result_cpu",
    cpp_sources=CPP_SRC,
    functions=["relu_cpu"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.relu_cpu(x.contiguous())
