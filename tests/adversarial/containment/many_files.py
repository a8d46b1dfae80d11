"""Opens files until the open-files limit stops it, reports how many it got to __SPY_PATH__, then
raises the error it hit."""
# @include _ext.py
import os


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()

    def forward(self, x):
        handles = []
        try:
            while len(handles) < 1_000_000:
                handles.append(open(os.devnull))
        except OSError as exc:
            error = exc
        for h in handles:
            h.close()
        with open("__SPY_PATH__", "w") as fh:
            fh.write(f"{len(handles)}\n{error}\n")
        raise error
