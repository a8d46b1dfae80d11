"""Writes to stdout without end: must be killed at the output limit, not fill the disk."""
# @include _ext.py
import os


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()

    def forward(self, x):
        chunk = b"flood " * 10922 + b"\n"
        while True:
            os.write(1, chunk)
