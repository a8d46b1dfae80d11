"""MaxPool2d as a C++ CPU extension (load_inline, cpp_sources only): plain loops over NCHW planes, the
window clipped to the image, NaN propagated like PyTorch."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SRC = r'''
#include <cmath>
#include <limits>

torch::Tensor maxpool2d_cpu(torch::Tensor x, int64_t k, int64_t s, int64_t p)
{
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32, "maxpool2d_cpu: expected a float32 CPU tensor");
    TORCH_CHECK(x.is_contiguous() && x.dim() == 4, "maxpool2d_cpu: expected a contiguous NCHW tensor");
    const int64_t n = x.size(0), c = x.size(1), H = x.size(2), W = x.size(3);
    const int64_t OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1;
    auto y = torch::empty({n, c, OH, OW}, x.options());
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    for (int64_t plane = 0; plane < n * c; ++plane) {
        const float* xi = xp + plane * H * W;
        float* yo = yp + plane * OH * OW;
        for (int64_t oh = 0; oh < OH; ++oh) {
            const int64_t h0 = oh * s - p;
            const int64_t hs = std::max<int64_t>(h0, 0), he = std::min<int64_t>(h0 + k, H);
            for (int64_t ow = 0; ow < OW; ++ow) {
                const int64_t w0 = ow * s - p;
                const int64_t ws = std::max<int64_t>(w0, 0), we = std::min<int64_t>(w0 + k, W);
                float m = -std::numeric_limits<float>::infinity();
                for (int64_t h = hs; h < he; ++h)
                    for (int64_t w = ws; w < we; ++w) {
                        const float v = xi[h * W + w];
                        if (v > m || std::isnan(v)) m = v;
                    }
                yo[oh * OW + ow] = m;
            }
        }
    }
    return y;
}
'''

_ext = load_inline(
    name="cf_example_maxpool2d_cpu",
    cpp_sources=CPP_SRC,
    functions=["maxpool2d_cpu"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding

    def forward(self, x):
        return _ext.maxpool2d_cpu(x.contiguous(), self.kernel_size, self.stride, self.padding)
