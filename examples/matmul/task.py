"""Dense fp32 matrix product C = A @ B with M = N = 4096, K = 2048 (69 GFLOP)."""
import torch
import torch.nn as nn

M = 4096
K = 2048
N = 4096


class Model(nn.Module):
    """C = A @ B for A of shape (M, K) and B of shape (K, N)."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    # B is scaled by 1/sqrt(K) so the entries of C are O(1): an absolute tolerance of 1e-4 then
    # leaves room for any honest fp32 summation order, while a wrong kernel still fails.
    A = torch.randn(M, K)
    B = torch.randn(K, N) / K**0.5
    return [A, B]


def get_init_inputs():
    return []
