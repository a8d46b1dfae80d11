#!/usr/bin/env bash
# Issue 13 on the GPU machine: the KernelBench sweep per level, level 1 under a 24 GB cap, and a batch of
# the ten largest level-1 problems (4 sessions at once, scripted replies). Outputs go under $OUT.
#
#   bash bench/gpu_issue13.sh all                 # everything, in this order (estimate: 12-20 min)
#   bash bench/gpu_issue13.sh level1|level2|level3|level1-24gb|batch   # one step (each well under 10 min)
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
export PYTHONUNBUFFERED=1

sweep() {  # name, extra args...
    local name=$1; shift
    [ "$SHARD" != 1/1 ] && name="$name-${SHARD/\//of}"
    local t0=$SECONDS
    rm -f "$OUT/$name.rows.jsonl"
    "$PY" bench/kernelbench_sweep.py --jobs "$JOBS" --shard "$SHARD" --json "$OUT/$name.json" --rows "$OUT/$name.rows.jsonl" "$@" \
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
            "$PY" bench/gpu_issue13_batch.py --out "$OUT/batch" > "$OUT/batch.log" 2>&1
            echo "batch: exit $? in $((SECONDS - t0)) s" >> "$OUT/steps.txt" ;;
        *) echo "unknown step $1" >&2; exit 2 ;;
    esac
}

if [ "${1:-all}" = all ]; then
    for s in level1 level2 level3 level1-24gb batch; do step "$s"; done
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
done
[ -f "$OUT/batch.log" ] && { echo "-- batch:"; tail -14 "$OUT/batch.log"; }
exit 0
