"""Matmul through load_inline (KernelBench style): the NVRTC candidate's fp32 SIMT GEMM (128x128x8
double-buffered tiles, 8x8 per thread, bounds-checked) behind a C++ host wrapper on the current stream."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r'''
#include <torch/types.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#define CF_BM 128
#define CF_BN 128
#define CF_BK 8

// Four consecutive floats p[r * ld + c .. c + 3], zero outside rows [0, rmax) and columns [0, cmax).
// vec != 0 promises cmax % 4 == 0, c % 4 == 0 and a 16-byte aligned p, so one float4 load is exact.
__device__ __forceinline__ float4 cf_load4(const float* __restrict__ p, long long ld, int r, int c, int rmax, int cmax, int vec)
{
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r < rmax) {
        const float* q = p + (long long)r * ld + c;
        if (vec) {
            if (c < cmax) v = *reinterpret_cast<const float4*>(q);
        } else {
            if (c + 0 < cmax) v.x = q[0];
            if (c + 1 < cmax) v.y = q[1];
            if (c + 2 < cmax) v.z = q[2];
            if (c + 3 < cmax) v.w = q[3];
        }
    }
    return v;
}

// C[M, N] = A[M, K] @ B[K, N], all row-major. 256 threads = 16 x 16; thread (tx, ty) owns rows
// {ty*4 .. ty*4+3, 64+ty*4 .. 64+ty*4+3} and the same pattern of columns with tx, which keeps the
// float4 reads of shared memory free of bank conflicts.
// vec_a: K % 4 == 0 and A aligned. vec_b: N % 4 == 0 and B, C aligned.
__global__ void cf_sgemm_nn(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K, int vec_a, int vec_b)
{
    __shared__ __align__(16) float As[2][CF_BK][CF_BM];   // A tile stored transposed: As[k][m]
    __shared__ __align__(16) float Bs[2][CF_BK][CF_BN];   // Bs[k][n]

    const int tid = threadIdx.x;
    const int tx = tid & 15, ty = tid >> 4;
    const int m0 = blockIdx.y * CF_BM, n0 = blockIdx.x * CF_BN;
    const int a_row = tid >> 1, a_col = (tid & 1) * 4;     // A tile: 128 rows x 8 k, one float4 each
    const int b_row = tid >> 5, b_col = (tid & 31) * 4;    // B tile: 8 k x 128 cols, one float4 each

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

    float4 ra = cf_load4(A, K, m0 + a_row, a_col, M, K, vec_a);
    float4 rb = cf_load4(B, N, b_row, n0 + b_col, K, N, vec_b);
    As[0][a_col + 0][a_row] = ra.x;
    As[0][a_col + 1][a_row] = ra.y;
    As[0][a_col + 2][a_row] = ra.z;
    As[0][a_col + 3][a_row] = ra.w;
    *reinterpret_cast<float4*>(&Bs[0][b_row][b_col]) = rb;
    __syncthreads();

    int buf = 0;
    for (int k0 = 0; k0 < K; k0 += CF_BK) {
        const bool has_next = k0 + CF_BK < K;
        if (has_next) {   // fetch the next tile into registers while this one is multiplied
            ra = cf_load4(A, K, m0 + a_row, k0 + CF_BK + a_col, M, K, vec_a);
            rb = cf_load4(B, N, k0 + CF_BK + b_row, n0 + b_col, K, N, vec_b);
        }
#pragma unroll
        for (int k = 0; k < CF_BK; ++k) {
            const float4 a_lo = *reinterpret_cast<const float4*>(&As[buf][k][ty * 4]);
            const float4 a_hi = *reinterpret_cast<const float4*>(&As[buf][k][64 + ty * 4]);
            const float4 b_lo = *reinterpret_cast<const float4*>(&Bs[buf][k][tx * 4]);
            const float4 b_hi = *reinterpret_cast<const float4*>(&Bs[buf][k][64 + tx * 4]);
            const float a[8] = {a_lo.x, a_lo.y, a_lo.z, a_lo.w, a_hi.x, a_hi.y, a_hi.z, a_hi.w};
            const float b[8] = {b_lo.x, b_lo.y, b_lo.z, b_lo.w, b_hi.x, b_hi.y, b_hi.z, b_hi.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        if (has_next) {   // the other buffer was last read before the previous barrier
            As[buf ^ 1][a_col + 0][a_row] = ra.x;
            As[buf ^ 1][a_col + 1][a_row] = ra.y;
            As[buf ^ 1][a_col + 2][a_row] = ra.z;
            As[buf ^ 1][a_col + 3][a_row] = ra.w;
            *reinterpret_cast<float4*>(&Bs[buf ^ 1][b_row][b_col]) = rb;
        }
        __syncthreads();
        buf ^= 1;
    }

#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int r = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + (i - 4));
        if (r < M) {
            float* crow = C + (long long)r * N;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int c = n0 + h * 64 + tx * 4;
                if (vec_b) {
                    if (c < N)
                        *reinterpret_cast<float4*>(crow + c) =
                            make_float4(acc[i][h * 4 + 0], acc[i][h * 4 + 1], acc[i][h * 4 + 2], acc[i][h * 4 + 3]);
                } else {
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        if (c + j < N) crow[c + j] = acc[i][h * 4 + j];
                }
            }
        }
    }
}

torch::Tensor matmul_forward(torch::Tensor A, torch::Tensor B)
{
    TORCH_CHECK(A.is_cuda() && B.is_cuda() && A.scalar_type() == torch::kFloat32 && B.scalar_type() == torch::kFloat32,
                "matmul_forward: expected float32 CUDA tensors");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(1) == B.size(0), "matmul_forward: expected (M, K) @ (K, N)");
    A = A.contiguous();
    B = B.contiguous();
    const long long M = A.size(0), K = A.size(1), N = B.size(1);
    TORCH_CHECK(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX, "matmul_forward: too large");
    auto C = torch::empty({M, N}, A.options());
    if (M == 0 || N == 0) return C;
    const c10::cuda::CUDAGuard guard(A.device());
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    auto aligned = [](const torch::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr<float>()) % 16 == 0; };
    const int vec_a = (K % 4 == 0 && aligned(A)) ? 1 : 0;
    const int vec_b = (N % 4 == 0 && aligned(B) && aligned(C)) ? 1 : 0;
    const dim3 grid((unsigned)((N + CF_BN - 1) / CF_BN), (unsigned)((M + CF_BM - 1) / CF_BM));
    TORCH_CHECK(grid.y <= 65535, "matmul_forward: M too large for the grid");
    cf_sgemm_nn<<<grid, 256, 0, stream>>>(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(),
                                          (int)M, (int)N, (int)K, vec_a, vec_b);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}
'''

CPP_SRC = """
torch::Tensor matmul_forward(torch::Tensor A, torch::Tensor B);
"""

_ext = load_inline(
    name="cf_example_matmul_inline",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["matmul_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return _ext.matmul_forward(A, B)
