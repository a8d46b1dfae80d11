#!/bin/bash
# GPU session 4, call 2 (issues 15, 16): the CUDA adversarial tests and their table, the Triton GPU
# tests and the Triton bench (do_bench agreement, round latency with a warm cache).
set -o pipefail
export PYTHONUNBUFFERED=1 CUDAFORGE_CACHE_DIR=/tmp/cfcache
python3 -m pip install -q --no-deps --no-build-isolation --no-index . > $OUT/install.txt 2>&1 || { echo "install failed"; tail -20 $OUT/install.txt; }
S=$(date +%s)
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -rf tests/test_adversarial.py > $OUT/pytest_adversarial.txt 2>&1
echo "adversarial tests rc=$? $(( $(date +%s) - S )) s"; S=$(date +%s)
timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu -rf tests/test_triton_gpu.py > $OUT/pytest_triton.txt 2>&1
echo "triton tests rc=$? $(( $(date +%s) - S )) s"; S=$(date +%s)
timeout 140 python3 bench/adversarial_table.py --json $OUT/adversarial.json > $OUT/adversarial_table.txt 2>&1
echo "adversarial table rc=$? $(( $(date +%s) - S )) s"; S=$(date +%s)
timeout 120 python3 bench/triton_gpu.py --json $OUT/triton_gpu.json > $OUT/triton_gpu.txt 2>&1
echo "triton bench rc=$? $(( $(date +%s) - S )) s"
for f in pytest_adversarial pytest_triton; do echo "== $f"; grep -E "passed|failed|FAILED|Error" $OUT/$f.txt | tail -8; done
echo "== adversarial table"; tail -22 $OUT/adversarial_table.txt
echo "== triton bench"; tail -16 $OUT/triton_gpu.txt
