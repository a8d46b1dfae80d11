#!/bin/bash
# GPU session 1: install, GPU tests, every example in both CUDA formats.
set -o pipefail
export PYTHONUNBUFFERED=1 CUDAFORGE_CACHE_DIR=/tmp/cfcache
python3 -m pip install -q --no-deps --no-build-isolation --no-index . > $OUT/install.txt 2>&1 || { echo "install failed"; tail -20 $OUT/install.txt; }
cd /tmp && python3 -c "import cudaforge.engine, importlib.resources as r; print('installed', cudaforge.engine.__file__, (r.files('cudaforge.profiles')/'cudaforge.toml').is_file(), len(list((r.files('cudaforge.profiles')/'gpus').iterdir())))"; cd - >/dev/null
timeout 250 python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/test_gpu.py 2>&1 | tee $OUT/pytest_gpu.txt | tail -25
timeout 300 python3 bench/gpu_examples.py --formats nvrtc,inline --json $OUT/examples.json --parallel 8 2>&1 | tee $OUT/examples.txt
