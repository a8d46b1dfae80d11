"""MaxPool2d through load_inline (KernelBench style): the NVRTC candidate's kernel (one thread per
output position looping over planes, 32-bit index math) behind a C++ host wrapper on the current stream."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r'''
#include <torch/types.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

// Grid: x covers the OH * OW outputs of one plane (plane = n * C + c), y strides over the planes, so
// the per-output index math is 32-bit. Output (oh, ow) covers input rows oh*stride - pad .. + ksize - 1
// (likewise columns); positions outside the image are skipped, the same as -inf padding.
__global__ void cf_maxpool2d(const float* __restrict__ x, float* __restrict__ y, int planes, int H, int W, int OH, int OW, int ksize, int stride, int pad)
{
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OH * OW) return;
    const int oh = o / OW, ow = o - oh * OW;
    const int h0 = oh * stride - pad, w0 = ow * stride - pad;
    const int hs = h0 < 0 ? 0 : h0, ws = w0 < 0 ? 0 : w0;
    const int he = h0 + ksize < H ? h0 + ksize : H;
    const int we = w0 + ksize < W ? w0 + ksize : W;
    for (long long plane = blockIdx.y; plane < planes; plane += gridDim.y) {
        const float* xp = x + plane * H * W;
        float m = __int_as_float(0xff800000);   // -inf
        for (int h = hs; h < he; ++h) {
            const float* row = xp + h * W;
            for (int w = ws; w < we; ++w) {
                const float v = row[w];
                if (v > m || isnan(v)) m = v;   // NaN wins, as in PyTorch
            }
        }
        y[plane * OH * OW + o] = m;
    }
}

torch::Tensor maxpool2d_forward(torch::Tensor x, int64_t k, int64_t s, int64_t p)
{
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 4, "maxpool2d_forward: expected a float32 NCHW CUDA tensor");
    x = x.contiguous();
    const long long n = x.size(0), c = x.size(1), H = x.size(2), W = x.size(3);
    const long long OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1;
    auto y = torch::empty({n, c, OH, OW}, x.options());
    if (y.numel() == 0) return y;
    TORCH_CHECK(H * W < INT_MAX && OH * OW < INT_MAX && n * c < INT_MAX, "maxpool2d_forward: too large for 32-bit indexing");
    const c10::cuda::CUDAGuard guard(x.device());
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const long long planes = n * c;
    const dim3 grid((unsigned)((OH * OW + 255) / 256), (unsigned)(planes < 65535 ? planes : 65535));
    cf_maxpool2d<<<grid, 256, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), (int)planes, (int)H, (int)W,
                                           (int)OH, (int)OW, (int)k, (int)s, (int)p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
'''

CPP_SRC = """
torch::Tensor maxpool2d_forward(torch::Tensor x, int64_t k, int64_t s, int64_t p);
"""

_ext = load_inline(
    name="cf_example_maxpool2d_inline",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["maxpool2d_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding

    def forward(self, x):
        return _ext.maxpool2d_forward(x, self.kernel_size, self.stride, self.padding)
