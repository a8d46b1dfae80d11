#!/bin/bash
# GPU session 5 (issues 6 and 7): the review-mode workbench session driven by Pilot (scripted LLM
# replies, real compile/verify/NCU) with its screenshot and run folder; the GPU correctness and
# adversarial tests, one at a time, on the shipped code; timing fidelity on the >=50 us examples.
set -o pipefail
export PYTHONUNBUFFERED=1 CUDAFORGE_CACHE_DIR=/tmp/cfcache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation --no-index . > $OUT/install.txt 2>&1 || { echo "install failed"; tail -20 $OUT/install.txt; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch;print(torch.__version__, torch.version.cuda)"
timeout 150 python3 bench/gpu_tui_session.py $OUT/screenshot.svg --story --copy-run $OUT/tui_run.tgz > $OUT/tui.txt 2>&1
echo "tui rc=$?"; tail -14 $OUT/tui.txt
PYTHONPATH= timeout 130 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py tests/test_adversarial.py \
  -k "example_is_accepted or gpu_" > $OUT/pytest_gpu.txt 2>&1; tail -6 $OUT/pytest_gpu.txt
PYTHONPATH= timeout 150 python3 bench/timing_fidelity.py --tasks relu,softmax,layernorm,maxpool2d --json $OUT/timing_fidelity.json \
  2>$OUT/timing_fidelity.err | tee $OUT/timing_fidelity.txt
