#!/usr/bin/env bash
# Set up (CPU torch 2.13.0 unless a torch is already installed) and run lint and the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python3 -c "import torch" 2>/dev/null && [ -z "${CUDAFORGE_TORCH:-}" ]; then
  export CUDAFORGE_TORCH="torch==2.13.0"
fi
CUDAFORGE_EXTRAS="test,triton,ray" bash scripts/setup.sh
.venv/bin/ruff check engine tui tests bench
bash scripts/lint_imports.sh
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
