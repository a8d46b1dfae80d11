"""Sleeps forever in forward (and ignores SIGTERM): must be killed at its phase limit."""
# @include _ext.py
import signal
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()

    def forward(self, x):
        while True:
            time.sleep(3600)
