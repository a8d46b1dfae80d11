"""Forks at import; the child starts its own session, forks a grandchild and exits, so the grandchild is
an orphan in another session (a process-group kill misses it). Both sleep forever; their pids go to
__PID_DIR__. Otherwise the candidate is correct."""
# @include _ext.py
import os
import time

_PID_DIR = "__PID_DIR__"

_child = os.fork()
if _child == 0:
    os.setsid()
    with open(os.path.join(_PID_DIR, "child.pid"), "w") as fh:
        fh.write(str(os.getpid()))
    if os.fork() == 0:
        with open(os.path.join(_PID_DIR, "grandchild.pid"), "w") as fh:
            fh.write(str(os.getpid()))
        while True:
            time.sleep(1)
    while True:
        time.sleep(1)


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(cols))

    def forward(self, x):
        return _ext.relu_scale_bias(x.contiguous(), self.bias, 2.0, float("inf"))
