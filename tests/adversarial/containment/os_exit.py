"""Leaves the worker with os._exit(0) in forward: no result, no exception, exit code 0."""
# @include _ext.py
import os


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()

    def forward(self, x):
        os._exit(0)
