#!/bin/bash
# GPU session 6 (issues 6 and 7), call 1: the review-mode workbench session driven by Pilot
# (scripted LLM replies, real compile/verify/NCU) with its screenshot and run folder; timing fidelity
# on all examples; every GPU test, one at a time. Engine: inputs drawn on the GPU, spares create their
# CUDA context under the machine-wide per-GPU lock and (outside ncu) start CUPTI while waiting.
set -o pipefail
export PYTHONUNBUFFERED=1 CUDAFORGE_CACHE_DIR=/tmp/cfcache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
python3 -m pip install -q --no-deps --no-build-isolation --no-index . > $OUT/install.txt 2>&1 || { echo "install failed"; tail -20 $OUT/install.txt; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch;print(torch.__version__, torch.version.cuda)"
S=$(date +%s)
PYTHONPATH=/tmp/site timeout 200 python3 bench/gpu_tui_session.py $OUT/screenshot.svg --story --copy-run $OUT/tui_run.tgz > $OUT/tui.txt 2>&1
echo "tui rc=$? $(( $(date +%s) - S )) s"; tail -12 $OUT/tui.txt
S=$(date +%s)
timeout 190 python3 bench/timing_fidelity.py --json $OUT/timing_fidelity.json 2>$OUT/timing_fidelity.err | tee $OUT/timing_fidelity.txt
echo "fidelity $(( $(date +%s) - S )) s"
S=$(date +%s)
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -rf tests/test_gpu.py tests/test_adversarial.py tests/test_convert.py \
  > $OUT/pytest_gpu.txt 2>&1; echo "pytest rc=$? $(( $(date +%s) - S )) s"; grep -E "passed|failed|FAILED|Error" $OUT/pytest_gpu.txt | tail -8
