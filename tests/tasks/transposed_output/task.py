"""A 16 MiB input and a 16 MiB output laid out transposed in memory (like an attention kernel's output):
dense, but not contiguous, so any reshape(-1) of it is a full copy."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The elementwise result keeps its input's layout: (64, 256, 256) values, transposed in memory.
        return torch.tanh(x.transpose(1, 2))


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(64, 256, 256)]


def get_init_inputs() -> list:
    return []
