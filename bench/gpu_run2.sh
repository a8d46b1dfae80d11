#!/bin/bash
# GPU session 2: GPU tests (engine + adversarial), doctor, and `cudaforge profile` on every example.
set -o pipefail
export PYTHONUNBUFFERED=1 CUDAFORGE_CACHE_DIR=/tmp/cfcache
python3 -m pip install -q --no-deps --no-build-isolation --no-index . > $OUT/install.txt 2>&1 || { echo "install failed"; tail -20 $OUT/install.txt; }
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py tests/test_adversarial.py 2>&1 | tee $OUT/pytest_gpu.txt | tail -15
cudaforge doctor 2>&1 | tee $OUT/doctor.txt
for t in relu gelu softmax layernorm matmul gemm_epilogue maxpool2d; do
  s=$(date +%s.%N)
  timeout 120 cudaforge profile examples/$t/task.py examples/$t/nvrtc.py > $OUT/profile_$t.txt 2>&1; rc=$?
  e=$(python3 -c "import time;print(round(time.time()-$s,1))")
  echo "profile $t rc=$rc wall=${e}s"
done
tar czf $OUT/profiles.tgz -C $OUT $(cd $OUT && ls profile_*.txt)
head -60 $OUT/profile_softmax.txt
