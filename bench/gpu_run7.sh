#!/bin/bash
# GPU session 6, call 2 (issue 7): timing fidelity on all examples and round latency, after the
# timing window change (time-based warm-up and trial count) and device-side input draws.
set -o pipefail
export PYTHONUNBUFFERED=1 CUDAFORGE_CACHE_DIR=/tmp/cfcache
python3 -m pip install -q --no-deps --no-build-isolation --no-index . > $OUT/install.txt 2>&1 || { echo "install failed"; tail -20 $OUT/install.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader; python3 -c "import torch;print(torch.__version__, torch.version.cuda)"
S=$(date +%s)
timeout 250 python3 bench/timing_fidelity.py --json $OUT/timing_fidelity.json 2>$OUT/timing_fidelity.err | tee $OUT/timing_fidelity.txt
echo "fidelity rc=$? $(( $(date +%s) - S )) s"
S=$(date +%s)
timeout 270 python3 bench/round_latency.py --ours relu,softmax,layernorm,matmul,maxpool2d,gelu,gemm_epilogue \
  --ours-inline relu,softmax --naive relu,softmax --json $OUT/round_latency.json 2>$OUT/round_latency.err > $OUT/round_latency.txt
echo "latency rc=$? $(( $(date +%s) - S )) s"; head -8 $OUT/round_latency.txt; tail -3 $OUT/round_latency.err
