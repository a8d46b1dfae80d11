#!/bin/bash
# GPU session 5, call 1 (diagnostic; issues 13, 15, 18): the adversarial table with 4 evaluations in flight
# (after the context-under-the-lock fix), a sampled KernelBench sweep with every worker phase recorded,
# and nvrtc round latency with the profile worker's own phases.
set -o pipefail
export PYTHONUNBUFFERED=1 CUDAFORGE_CACHE_DIR=/tmp/cfcache
python3 -m pip install -q --no-deps --no-build-isolation --no-index . > $OUT/install.txt 2>&1 || { echo "install failed"; tail -20 $OUT/install.txt; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__)"
S=$(date +%s)
timeout 150 python3 bench/adversarial_table.py --parallel 4 --json $OUT/adversarial.json > $OUT/adversarial_table.txt 2>&1
echo "adversarial: rc=$? $(( $(date +%s) - S )) s"
for spec in "1 1/3 170" "2 1/5 70" "3 1/5 90"; do
  set -- $spec
  S=$(date +%s)
  timeout $3 python3 bench/kernelbench_sweep.py .kb --levels $1 --shard $2 --jobs 6 --json $OUT/level$1.json \
    --rows $OUT/level$1.rows.jsonl > $OUT/level$1.log 2>&1
  echo "level$1 shard $2: rc=$? $(( $(date +%s) - S )) s, rows $(wc -l < $OUT/level$1.rows.jsonl 2>/dev/null)"
done
S=$(date +%s)
timeout 120 python3 bench/round_latency.py --ours relu,softmax,gelu --formats nvrtc --naive "" --json $OUT/round_latency.json > $OUT/round_latency.txt 2> $OUT/round_latency.log
echo "round_latency: rc=$? $(( $(date +%s) - S )) s"
echo "== adversarial"; head -3 $OUT/adversarial_table.txt
for l in 1 2 3; do echo "== level$l"; grep -E "^(MISS|SKIP)" $OUT/level$l.log | cut -c1-160 | head -6; tail -6 $OUT/level$l.log | cut -c1-400; done
echo "== round latency"; grep -E "ours|phases" $OUT/round_latency.log | cut -c1-400
