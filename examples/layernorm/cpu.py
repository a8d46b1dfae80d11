"""LayerNorm as a C++ CPU extension (load_inline, cpp_sources only): two-pass mean/variance per row in
double, then the affine transform; parameters live in self.ln like the reference."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

EPS = 1e-5

CPP_SRC = r'''
#include <cmath>

torch::Tensor layernorm_cpu(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps)
{
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32, "layernorm_cpu: expected a float32 CPU tensor");
    TORCH_CHECK(x.is_contiguous() && w.is_contiguous() && b.is_contiguous(), "layernorm_cpu: expected contiguous tensors");
    TORCH_CHECK(x.dim() >= 1 && w.numel() == x.size(-1) && b.numel() == x.size(-1), "layernorm_cpu: bad shapes");
    auto y = torch::empty_like(x);
    if (x.numel() == 0) return y;
    const int64_t cols = x.size(-1);
    const int64_t rows = x.numel() / cols;
    const float* xp = x.data_ptr<float>();
    const float* wp = w.data_ptr<float>();
    const float* bp = b.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = xp + r * cols;
        float* yr = yp + r * cols;
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) s += xr[c];
        const double mean = s / (double)cols;
        double q = 0.0;
        for (int64_t c = 0; c < cols; ++c) {
            const double d = xr[c] - mean;
            q += d * d;
        }
        const float rstd = (float)(1.0 / std::sqrt(q / (double)cols + eps));
        const float meanf = (float)mean;
        for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - meanf) * rstd * wp[c] + bp[c];
    }
    return y;
}
'''

_ext = load_inline(
    name="cf_example_layernorm_cpu",
    cpp_sources=CPP_SRC,
    functions=["layernorm_cpu"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.ln = nn.LayerNorm(hidden, eps=EPS)
        with torch.no_grad():
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        w = self.ln.weight.detach().contiguous()
        b = self.ln.bias.detach().contiguous()
        return _ext.layernorm_cpu(x.contiguous(), w, b, float(self.ln.eps))
