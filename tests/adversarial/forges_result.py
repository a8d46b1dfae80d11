"""Forges the worker's verdict: reads the worker's spec (its path is the worker's argv), writes an
"ok" result with a large speedup itself and leaves with os._exit(0) before any check runs."""
# @include _ext.py
import json
import os
import sys

_spec = json.load(open(sys.argv[1]))
_stats = {"median_ms": 0.01, "iqr_ms": 0.0, "min_ms": 0.01, "max_ms": 0.01, "mean_ms": 0.01, "trials": 5,
          "method": "perf_counter"}
with open(_spec["result_path"], "w") as _fh:
    json.dump({"outcome": "ok", "message": "", "findings": [], "phases": {},
               "compile": {"ok": True, "format": "cpu"},
               "timing": {"reference": {**_stats, "median_ms": 1.0}, "candidate": _stats, "speedup": 100.0,
                          "speedup_low": 100.0, "speedup_high": 100.0}}, _fh)
os._exit(0)


class ModelNew(nn.Module):
    pass
