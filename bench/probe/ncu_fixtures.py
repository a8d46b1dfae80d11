"""Launch a few representative kernels inside an NVTX range so ncu can record fixtures.

Kernels: a bandwidth-bound elementwise scale (NVRTC), a register/shared-memory heavy kernel with
low occupancy (NVRTC), and a cuBLAS fp32 matmul (compute-bound).
"""
import torch

ELEMENTWISE = r"""
extern "C" __global__ void cf_scale(const float* x, float* y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i];
}
"""
HEAVY = r"""
extern "C" __global__ void cf_heavy(const float* x, float* y, int n) {
  extern __shared__ float buf[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float acc[64];
  #pragma unroll
  for (int k = 0; k < 64; ++k) acc[k] = (i < n) ? x[(i + k * 977) % n] : 0.f;
  buf[threadIdx.x] = acc[threadIdx.x % 64];
  __syncthreads();
  float s = 0.f;
  #pragma unroll
  for (int k = 0; k < 64; ++k) s += acc[k] * acc[(k * 7) % 64] + buf[(threadIdx.x + k) % blockDim.x];
  if (i < n) y[i] = s;
}
"""


def main() -> None:
    dev = torch.device("cuda")
    n = 1 << 24
    x = torch.randn(n, device=dev)
    y = torch.empty_like(x)
    a = torch.randn(2048, 2048, device=dev)
    b = torch.randn(2048, 2048, device=dev)
    torch.backends.cuda.matmul.allow_tf32 = False
    scale = torch.cuda._compile_kernel(ELEMENTWISE, "cf_scale")
    heavy = torch.cuda._compile_kernel(HEAVY, "cf_heavy")
    stream = torch.cuda.current_stream()
    torch.cuda.synchronize()
    with torch.cuda.nvtx.range("candidate"):
        scale(grid=((n + 255) // 256, 1, 1), block=(256, 1, 1), args=[x, y, 2.0, n], stream=stream)
        heavy(grid=((n + 255) // 256, 1, 1), block=(256, 1, 1), args=[x, y, n], shared_mem=40 * 1024, stream=stream)
        torch.matmul(a, b)
    torch.cuda.synchronize()
    print("ok", float(y[:4].sum()))


if __name__ == "__main__":
    main()
