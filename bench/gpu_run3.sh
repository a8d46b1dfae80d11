#!/bin/bash
# GPU session 3 (issue 7): NVRTC fast path and export tests, timing fidelity, round latency, inductor cache.
set -o pipefail
export PYTHONUNBUFFERED=1 CUDAFORGE_CACHE_DIR=/tmp/cfcache
python3 -m pip install -q --no-deps --no-build-isolation --no-index . > $OUT/install.txt 2>&1 || { echo "install failed"; tail -20 $OUT/install.txt; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch;print(torch.__version__, torch.version.cuda)"
timeout 80 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_convert.py tests/test_gpu.py -k "convert or nvrtc_packs or dynamic_shared" 2>&1 | tee $OUT/pytest_gpu.txt | tail -6
timeout 140 python3 bench/timing_fidelity.py --json $OUT/timing_fidelity.json 2>$OUT/timing_fidelity.err | tee $OUT/timing_fidelity.txt
timeout 300 python3 bench/round_latency.py --json $OUT/round_latency.json 2>$OUT/round_latency.err | tee $OUT/round_latency.txt
