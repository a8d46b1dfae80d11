#!/bin/bash
# Issue 18 on the GPU machine (about 4-5 min expected, at most 6 min by its timeouts; run from the repo root, $OUT set by the runner):
#  1. spare wait per round in a scripted 4-round session (gelu, nvrtc, NCU on, replies at once) and
#     evaluation throughput (21 nvrtc evaluations, 4 in flight, without and with spares): bench/spare_wait.py
#  2. round latency, nvrtc with its profile, over the examples (ours only): bench/round_latency.py
#  3. key-press-to-render in Pilot on the H200 while rounds run (needs textual: .whl/ wheels as in gpu_run6.sh)
set -o pipefail
export PYTHONUNBUFFERED=1 CUDAFORGE_CACHE_DIR=/tmp/cfcache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
python3 -m pip install -q --no-deps --no-build-isolation --no-index . > $OUT/install.txt 2>&1 || { echo "install failed"; tail -20 $OUT/install.txt; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
S=$(date +%s)
timeout 150 python3 bench/spare_wait.py --json $OUT/spare_wait.json > $OUT/spare_wait.txt 2>$OUT/spare_wait.err
echo "spare_wait rc=$? $(( $(date +%s) - S )) s"; tail -16 $OUT/spare_wait.txt
S=$(date +%s)
timeout 110 python3 bench/round_latency.py --formats nvrtc --naive "" --ours relu,softmax,layernorm,matmul,maxpool2d,gelu,gemm_epilogue \
  --json $OUT/round_latency.json > $OUT/round_latency.txt 2>$OUT/round_latency.err
echo "round_latency rc=$? $(( $(date +%s) - S )) s"; sed -n 1,4p $OUT/round_latency.txt
if PYTHONPATH=/tmp/site python3 -c "import textual" 2>/dev/null; then
  S=$(date +%s)
  PYTHONPATH=/tmp/site timeout 100 python3 bench/gpu_tui_session.py $OUT/screenshot.svg --rounds 3 > $OUT/tui.txt 2>&1
  echo "tui rc=$? $(( $(date +%s) - S )) s"; grep -i "latency" $OUT/tui.txt | tail -3
else
  echo "textual not importable: key latency on the H200 skipped (carry the wheels in .whl/)"
fi
