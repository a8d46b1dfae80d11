#!/usr/bin/env bash
# Create .venv and install cudaforge into it (editable).
# A torch that is already importable by python3 (e.g. your CUDA build) is reused through
# --system-site-packages; otherwise pip installs one. CUDAFORGE_TORCH pins the torch to install
# (CI uses the CPU build, torch==2.13.0).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
EXTRAS=${CUDAFORGE_EXTRAS:-}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv --system-site-packages .venv
fi
if [ -n "${CUDAFORGE_TORCH:-}" ]; then
  .venv/bin/python -m pip install -q "$CUDAFORGE_TORCH"
fi
if [ -n "$EXTRAS" ]; then
  .venv/bin/python -m pip install -q -e ".[$EXTRAS]"
else
  .venv/bin/python -m pip install -q -e .
fi
