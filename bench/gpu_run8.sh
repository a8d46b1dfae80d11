#!/bin/bash
# GPU session 6, call 3 (issues 6, 7): timing fidelity after queuing the timed calls without a
# per-call synchronize (as do_bench does), then every GPU test, one at a time.
set -o pipefail
export PYTHONUNBUFFERED=1 CUDAFORGE_CACHE_DIR=/tmp/cfcache
python3 -m pip install -q --no-deps --no-build-isolation --no-index . > $OUT/install.txt 2>&1 || { echo "install failed"; tail -20 $OUT/install.txt; }
S=$(date +%s)
timeout 230 python3 bench/timing_fidelity.py --json $OUT/timing_fidelity.json 2>$OUT/timing_fidelity.err | tee $OUT/timing_fidelity.txt
echo "fidelity rc=$? $(( $(date +%s) - S )) s"
S=$(date +%s)
timeout 250 python3 -m pytest -q -p no:cacheprovider -m gpu -rf tests/test_adversarial.py tests/test_gpu.py tests/test_convert.py \
  > $OUT/pytest_gpu.txt 2>&1; echo "pytest rc=$? $(( $(date +%s) - S )) s"; grep -E "passed|failed|FAILED" $OUT/pytest_gpu.txt | tail -8
