"""2-D max pooling, kernel 3, stride 2, padding 1, over a (32, 96, 128, 128) fp32 NCHW batch."""
import torch
import torch.nn as nn

BATCH = 32
CHANNELS = 96
HEIGHT = 128
WIDTH = 128
KERNEL_SIZE = 3
STRIDE = 2
PADDING = 1


class Model(nn.Module):
    """nn.MaxPool2d(kernel_size, stride, padding); padded positions never win (they count as -inf)."""

    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [KERNEL_SIZE, STRIDE, PADDING]
