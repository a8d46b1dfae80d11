#!/bin/bash
# GPU session 4, call 3 (issues 14, 16, 13): on the final code, the GPU tests (examples, memory,
# export), the scripted review session in the workbench with Triton replies, and a level-1 shard of
# the KernelBench sweep after the cache-reuse masks moved to the GPU.
set -o pipefail
export PYTHONUNBUFFERED=1 CUDAFORGE_CACHE_DIR=/tmp/cfcache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
python3 -m pip install -q --no-deps --no-build-isolation --no-index . > $OUT/install.txt 2>&1 || { echo "install failed"; tail -20 $OUT/install.txt; }
mkdir -p ../shared 2>/dev/null && [ ! -e ../shared/kernelbench ] && ln -s "$PWD/.kb" ../shared/kernelbench
S=$(date +%s)
PYTHONPATH=/tmp/site timeout 170 python3 bench/gpu_tui_session.py $OUT/triton_tui.svg --triton --rounds 2 > $OUT/triton_tui.txt 2>&1
echo "triton tui rc=$? $(( $(date +%s) - S )) s"; S=$(date +%s)
timeout 290 python3 -m pytest -q -p no:cacheprovider -m gpu -rf tests/test_gpu.py tests/test_kernelbench.py tests/test_convert.py \
  > $OUT/pytest_gpu.txt 2>&1; echo "pytest rc=$? $(( $(date +%s) - S )) s"; S=$(date +%s)
timeout 95 python3 bench/kernelbench_sweep.py .kb --levels 1 --shard 1/4 --jobs 6 --rows $OUT/level1q.rows.jsonl > $OUT/level1q.log 2>&1
echo "sweep shard rc=$? $(( $(date +%s) - S )) s rows $(wc -l < $OUT/level1q.rows.jsonl 2>/dev/null)"
echo "== triton tui"; tail -12 $OUT/triton_tui.txt
echo "== pytest"; grep -E "passed|failed|FAILED|Error" $OUT/pytest_gpu.txt | tail -10
echo "== sweep shard"; grep -E "^(ok|MISS|SKIP)" $OUT/level1q.log | cut -c1-190 | tail -20
