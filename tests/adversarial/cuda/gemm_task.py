"""GPU adversarial task with a GEMM: y = relu(x @ W^T + b) (nn.Linear 2048 -> 2048, batch 4096, fp32).
The reference launches cuBLAS for the GEMM plus elementwise kernels."""
import torch
import torch.nn as nn

BATCH = 4096
IN_FEATURES = 2048
OUT_FEATURES = 2048


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
