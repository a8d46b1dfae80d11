#!/bin/bash
# GPU session 4 (issue 7 after input draws on the device and CUPTI warm spares): GPU correctness
# tests again (inputs are now drawn on the GPU), timing fidelity, round latency (ours on all nvrtc
# examples, inline on two, naive on relu and softmax in the same invocation).
set -o pipefail
export PYTHONUNBUFFERED=1 CUDAFORGE_CACHE_DIR=/tmp/cfcache
python3 -m pip install -q --no-deps --no-build-isolation --no-index . > $OUT/install.txt 2>&1 || { echo "install failed"; tail -20 $OUT/install.txt; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch;print(torch.__version__, torch.version.cuda)"
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/test_gpu.py tests/test_adversarial.py \
  -k "example_is_accepted or gpu_" 2>&1 | tee $OUT/pytest_gpu.txt | tail -4
timeout 150 python3 bench/timing_fidelity.py --json $OUT/timing_fidelity.json 2>$OUT/timing_fidelity.err | tee $OUT/timing_fidelity.txt
timeout 270 python3 bench/round_latency.py --ours relu,softmax,layernorm,matmul,maxpool2d,gelu,gemm_epilogue \
  --ours-inline relu,softmax --naive relu,softmax --json $OUT/round_latency.json 2>$OUT/round_latency.err | tee $OUT/round_latency.txt | tail -30
