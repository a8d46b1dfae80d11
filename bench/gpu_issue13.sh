#!/usr/bin/env bash
# Issue 13 on the GPU machine: the KernelBench sweep per level, level 1 under a 24 GB cap, and a batch of
# the ten largest level-1 problems (4 sessions at once, scripted replies). Outputs go under $OUT.
#
#   bash bench/gpu_issue13.sh all      # everything, in this order (estimate: 20-30 min: more than one call)
#   bash bench/gpu_issue13.sh tests|level1|level2|level3|level1-24gb|batch   # one step (each under 10 min)
#   SHARD=1/2 bash bench/gpu_issue13.sh level1; SHARD=2/2 bash bench/gpu_issue13.sh level1   # a level in halves
#
# Each sweep writes $OUT/<step>.log (one row per problem, flushed as it finishes), <step>.rows.jsonl and
# <step>.json; the batch writes $OUT/batch/batch13.json. The last lines printed are a short table.
# Needs ../shared/kernelbench (the 250 problem files) beside the repository.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cudaforge-issue13}
PY=${PYTHON:-python3}
JOBS=${JOBS:-4}
SHARD=${SHARD:-1/1}   # e.g. SHARD=1/2 then SHARD=2/2 to split a level over two commands
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUDAFORGE_CACHE_DIR=${CUDAFORGE_CACHE_DIR:-/tmp/cfcache}
# The KernelBench problems: $KB, else ../shared/kernelbench, else ./shared/kernelbench.
KB=${KB:-}
for cand in "$KB" ../shared/kernelbench shared/kernelbench; do
    [ -n "$cand" ] && [ -d "$cand/level1" ] && { KB=$cand; break; }
done
[ -d "$KB/level1" ] || { echo "no KernelBench folder (set KB=...)" >&2; exit 3; }
"$PY" -c "import cudaforge.engine" 2>/dev/null || \
    "$PY" -m pip install -q --no-deps --no-build-isolation --no-index . > "$OUT/install.txt" 2>&1 || \
    { echo "install failed"; tail -20 "$OUT/install.txt"; }

sweep() {  # name, extra args...
    local name=$1; shift
    [ "$SHARD" != 1/1 ] && name="$name-${SHARD/\//of}"
    local t0=$SECONDS
    rm -f "$OUT/$name.rows.jsonl"
    timeout "${STEP_TIMEOUT:-570}" "$PY" bench/kernelbench_sweep.py "$KB" --jobs "$JOBS" --shard "$SHARD" --json "$OUT/$name.json" --rows "$OUT/$name.rows.jsonl" "$@" \
        > "$OUT/$name.log" 2>&1
    echo "$name: exit $? in $((SECONDS - t0)) s" >> "$OUT/steps.txt"
}

step() {
    case "$1" in
        level1) sweep level1 --levels 1 ;;
        level2) sweep level2 --levels 2 ;;
        level3) sweep level3 --levels 3 ;;
        level1-24gb) sweep level1-24gb --levels 1 --gpu-memory-gb 24 ;;
        batch)
            local t0=$SECONDS
            timeout "${STEP_TIMEOUT:-570}" "$PY" bench/gpu_issue13_batch.py --folder "$KB" --out "$OUT/batch" > "$OUT/batch.log" 2>&1
            echo "batch: exit $? in $((SECONDS - t0)) s" >> "$OUT/steps.txt" ;;
        tests)  # the GPU tests of this issue, and the adversarial ones that must still pass
            local t0=$SECONDS
            timeout 540 "$PY" -m pytest -q -p no:cacheprovider -m gpu -rf tests/test_kernelbench.py \
                tests/test_adversarial.py tests/test_gpu.py > "$OUT/pytest_gpu.txt" 2>&1
            echo "tests: exit $? in $((SECONDS - t0)) s" >> "$OUT/steps.txt" ;;
        *) echo "unknown step $1" >&2; exit 2 ;;
    esac
}

if [ "${1:-all}" = all ]; then
    for s in tests level1 level2 level3 level1-24gb batch; do step "$s"; done
else
    for s in "$@"; do step "$s"; done
fi

echo "== issue 13 summary ($OUT) =="
cat "$OUT/steps.txt" 2>/dev/null
for log in "$OUT"/level*.log; do
    [ -f "$log" ] || continue
    name=$(basename "$log" .log)
    echo "-- $name: rows not as expected (MISS/SKIP):"
    grep -E '^(MISS|SKIP)' "$OUT/$name.log" | cut -c1-220 | head -20
    grep -A6 '^level ' "$OUT/$name.log" | tail -6
    echo "   rows written: $(wc -l < "$OUT/$name.rows.jsonl" 2>/dev/null || echo 0)"
done
[ -f "$OUT/batch.log" ] && { echo "-- batch:"; tail -14 "$OUT/batch.log"; }
[ -f "$OUT/pytest_gpu.txt" ] && { echo "-- GPU tests:"; grep -E "passed|failed|FAILED|Error" "$OUT/pytest_gpu.txt" | tail -8; }
exit 0
