#!/bin/bash
# GPU session 4, call 1 (issues 13, 18): the KernelBench sweep, one command per level, rows flushed as
# each problem finishes, 6 evaluations in flight. KernelBench is carried in .kb (not committed).
set -o pipefail
export PYTHONUNBUFFERED=1 CUDAFORGE_CACHE_DIR=/tmp/cfcache
python3 -m pip install -q --no-deps --no-build-isolation --no-index . > $OUT/install.txt 2>&1 || { echo "install failed"; tail -20 $OUT/install.txt; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__)"
for spec in "1 320" "2 120" "3 110"; do
  set -- $spec
  S=$(date +%s)
  timeout $2 python3 bench/kernelbench_sweep.py .kb --levels $1 --jobs ${JOBS:-6} --json $OUT/level$1.json \
    --rows $OUT/level$1.rows.jsonl > $OUT/level$1.log 2>&1
  echo "level$1: rc=$? $(( $(date +%s) - S )) s, rows $(wc -l < $OUT/level$1.rows.jsonl 2>/dev/null)"
done
for l in 1 2 3; do echo "== level$l"; grep -E "^(MISS|SKIP)" $OUT/level$l.log | cut -c1-200 | head -12; tail -12 $OUT/level$l.log; done
