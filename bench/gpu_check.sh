#!/usr/bin/env bash
# The GPU proof of a change, in steps that each fit one device call (at most 9 minutes, install included).
#
#   bench/gpu_check.sh --list                        # the steps, what each answers, what it needs
#   bench/gpu_check.sh tests                         # one step
#   bench/gpu_check.sh latency fidelity adversarial  # several steps in one call (add up their minutes)
#   SHARD=1/2 bench/gpu_check.sh sweep-level1        # a sweep over half of a level (SHARD=2/2 the other half)
#
# Run from anywhere (it changes to the repository root). Logs go under $OUT (the device runner sets it), else
# bench/results/gpu_check-<UTC time>/: <step>.log for each step, and the benches' own .json/.txt files.
# The last lines printed are one table: step, status, seconds, key figures.
#
# Environment:
#   KERNELBENCH_DIR  the KernelBench problems (level1..level3); default: .kb/ in the repository (the ignored
#                    folder carried to the GPU machine), else ../shared/kernelbench, else shared/kernelbench
#   PYTHON           the interpreter (python3)
#   JOBS             evaluations in flight for the sweeps (8); GPU_MEMORY_GB their per-worker cap (24)
#   SHARD            K/N: only every N-th problem of a sweep, from the K-th (1/1)
#   FIDELITY_ARGS    more arguments for bench/timing_fidelity.py (e.g. --proc-samples: what ran in a slow window)
#   ORDER_FROM       earlier sweeps' rows files: the sweeps run the longest problems first by their walls there
#                    (default: the committed rows of sessions 11 and up, bench/results/*-s1?-*sweep-level*.rows.jsonl,
#                    and the whole sweeps' of session 15 and up;
#                    "none": the problems' own order)
#   TRACE_PROBLEM    the problem of the peak-trace step (level1/97_ScaledDotProductAttention)
#   SOL_START        the first level-1 problem of the sol step (1; it ends at 20); SOL_NO_EXAMPLES=1 skips
#                    the examples (evaluated one at a time first, about 10 s each in a fresh worker)
#   STEP_LIMIT       seconds a step may run (500; the call also installs the package first)
#   STEP_LIMITS      per-step limits that override it, e.g. "tests=230 sol=300"
#   SPARE_WAIT_S     seconds of the latency step left to bench/spare_wait.py (60; the rounds get the rest)
#   SWEEP_ARGS       more arguments for the sweep steps' kernelbench_sweep.py, e.g. "--no-look-further"
#   DISTURBANCE_ARGS more arguments for bench/window_disturbance.py, e.g. "--measure memory --only spare-context,context"
#   TESTS_K          a pytest -k expression for the tests steps: only the GPU tests it names (e.g. a new one)
#   TEST_WORKERS     pytest-xdist processes for the test steps where xdist is installed (4; 0: one process).
#                    The evaluations of parallel tests share the GPU through the same lock as any of ours.
# Steps that drive a session or the workbench need textual/openai/anthropic/tomlkit/pydantic: where they are
# not importable, the wheels in .whl/ (carried; bench/device_wheels.py fills it) are installed into /tmp/site for
# those steps only. The engine-only steps run without them, which also shows the engine's GPU path does not need them.
# Exit: 0 every step ok, 1 a step failed or ran out of time, 2 unknown step, 3 cudaforge could not be installed.
set -u
cd "$(dirname "$0")/.." || exit 3
REPO=$PWD
PY=${PYTHON:-python3}
JOBS=${JOBS:-8}
GPU_MEMORY_GB=${GPU_MEMORY_GB:-24}
SHARD=${SHARD:-1/1}
SOL_START=${SOL_START:-1}
ORDER_FROM=${ORDER_FROM:-$(ls bench/results/*-s1[1-9]-*sweep-level*.rows.jsonl bench/results/*-s1[5-9]-*sweep-all.rows.jsonl \
    2>/dev/null | tr '\n' ' ')}
[ "$ORDER_FROM" = none ] && ORDER_FROM=""
STEP_LIMIT=${STEP_LIMIT:-500}
STEP_LIMITS=${STEP_LIMITS:-}
TEST_WORKERS=${TEST_WORKERS:-4}
FIDELITY_ARGS=${FIDELITY_ARGS:-}
SITE=${GPU_CHECK_SITE:-/tmp/site}
export PYTHONUNBUFFERED=1 CUDAFORGE_CACHE_DIR=${CUDAFORGE_CACHE_DIR:-/tmp/cfcache}

# name|minutes (expected)|needs|question it answers
STEPS="tests|5|gpu|Do the engine's GPU tests pass (examples, memory, KernelBench, export): pytest -m gpu
tests-integrity|5|gpu|Do the adversarial and Triton GPU tests pass: pytest -m gpu tests/test_adversarial.py tests/test_triton_gpu.py
examples|3|gpu|Is every example accepted in nvrtc and inline, and does cudaforge doctor see the GPU: bench/gpu_examples.py
latency|5|gpu,wheels|How long is a round (nvrtc, 7 examples, with and without its profile), how long a spare is waited for: bench/round_latency.py, bench/spare_wait.py
spares|3|gpu,wheels|Does every round of a scripted session find its spares warm, and does every profile succeed (SPARE_ROUNDS rounds, two sessions; each profile's spare pool at its take, a failed profile's ncu and target lines): bench/spare_wait.py
fidelity|5|gpu|Do our timings agree with triton.testing.do_bench: bench/timing_fidelity.py
fidelity-nocover|5|gpu|The same with the flush alone ([timing] launch_cover = false): the launch cover's A/B, run beside the fidelity step in one call
cover|2|gpu|Does the launch cover keep a loaded host's delay out of a timed call's events, and leave a call host-bound by itself at the host's pace; does a spare make its context only between timed windows: their GPU tests
adversarial|3|gpu|Is every adversarial candidate caught with evaluations in flight: bench/adversarial_table.py
triton|3|gpu|Do Triton candidates time like do_bench, and how long is a Triton round: bench/triton_gpu.py
sweep-level1|9|gpu,kernelbench|Does every KernelBench level-1 reference get its verdict under the memory cap: bench/kernelbench_sweep.py
sweep-level2|9|gpu,kernelbench|The same for level 2
sweep-level3|9|gpu,kernelbench|The same for level 3
sweep-all|9|gpu,kernelbench|Do all 250 problems get their verdicts in one sweep, and how long does it take (the issue's 5-minute target): bench/kernelbench_sweep.py --levels 1,2,3
sweep-recheck|4|gpu,kernelbench|The same for the problems listed in bench/lists/sweep-recheck.txt (the last sweep's misses and outliers)
rnn-alone|2|gpu,kernelbench|How long is a host-bound RNN's timed call with no other evaluation beside it (bench/lists/rnn-windows.txt, one at a time): bench/kernelbench_sweep.py --jobs 1, its rows' timing record
window-stacks|2|gpu,kernelbench|What do timed windows do while they hold the GPU alone (cuDNN problems, bench/lists/cudnn-windows.txt): a sweep with stack samples, bench/stack_summary.py
batch|8|gpu,kernelbench,wheels|Do 4 sessions at once over the ten largest level-1 problems stay out of oom under the cap: bench/batch_largest.py
tui|4|gpu,wheels|Does the workbench run a review session on the GPU, and how fast do keys render: bench/workbench_session.py
sol|4|gpu|How far is each result from the speed of light: bench/speed_of_light.py (skipped where absent)
host-copy|1|gpu|How fast is a 2 GiB device-to-host copy into new memory, a reused buffer and a page-locked one: bench/host_copy_bench.py
peak-trace|2|gpu,kernelbench|Which tensors make one problem's peak (TRACE_PROBLEM, level1/97 by default): cudaforge eval with the allocator's history, bench/peak_trace.py
ncu-cost|2|gpu|What each ncu metric set costs the round's profile (passes, the worker's profile phase): bench/ncu_cost.py
event-gap|1|gpu|Where the CUDA events and CUPTI's kernel time part on a short kernel (gelu): bench/event_gap.py
disturbance|2|gpu|Which of another process's steps (context creation, cudaFree, page-locking, a CUPTI session, copies, host load) change a timed window's kernel times: bench/window_disturbance.py
launch-path|2|gpu|Is a slow launch path (the fidelity misses) a property of the CPU, of the process or of a busy neighbour CPU: bench/launch_path.py
ncu-spares|1|gpu|Do ncu-wrapped spare profile workers warm side by side, or does each wait for the ncu before it to end: bench/ncu_spares.py"

list_steps() {
    printf '%-16s %-4s %-24s %s\n' step min needs "question"
    while IFS='|' read -r name minutes needs question; do
        printf '%-16s %-4s %-24s %s\n' "$name" "$minutes" "$needs" "$question"
    done <<< "$STEPS"
}

known_step() { grep -q "^$1|" <<< "$STEPS"; }

case "${1:-}" in
    ""|-h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; echo; list_steps; exit 0 ;;
    --list) list_steps; exit 0 ;;
esac
for s in "$@"; do
    known_step "$s" || { echo "unknown step '$s' (bench/gpu_check.sh --list names them)" >&2; exit 2; }
done

OUT=${OUT:-$REPO/bench/results/gpu_check-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
SUMMARY="$OUT/summary.tsv"
: > "$SUMMARY"

# --- set-up -------------------------------------------------------------------------------------------
KB=""
for cand in "${KERNELBENCH_DIR:-}" .kb ../shared/kernelbench shared/kernelbench; do
    [ -n "$cand" ] && [ -d "$cand/level1" ] && { KB=$(cd "$cand" && pwd); break; }
done
# tests/test_kernelbench.py reads ../shared/kernelbench: point it at the carried copy where it is missing.
if [ -n "$KB" ] && [ ! -e ../shared/kernelbench ]; then
    mkdir -p ../shared 2>/dev/null && ln -s "$KB" ../shared/kernelbench 2>/dev/null
fi

installed_here=$("$PY" -c "import os, cudaforge.engine as e; print(os.path.realpath(os.path.dirname(e.__file__)))" 2>/dev/null)
if [ "$installed_here" != "$(realpath engine)" ]; then  # not an editable install of this checkout: install it
    "$PY" -m pip install -q --no-deps --no-build-isolation --no-index . > "$OUT/install.txt" 2>&1 || {
        echo "cannot install cudaforge from $REPO:"; tail -20 "$OUT/install.txt"; exit 3; }
fi
{ command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
  # the host's page settings: host_buffers.advise_huge_pages asks for huge pages, which "never" refuses
  echo "transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo absent);" \
      "defrag: $(cat /sys/kernel/mm/transparent_hugepage/defrag 2>/dev/null || echo absent); $(nproc) CPUs"
} 2>&1 | tee "$OUT/machine.txt"

# What the session and workbench steps import; bench/device_wheels.py ROOTS fills .whl/ with the same (a CI test
# keeps the two equal).
SESSION_IMPORTS="import textual, openai, anthropic, tomlkit, pydantic"
WHEEL_PATH=""
WHEELS=""  # "" not tried, "ok" importable (PYTHONPATH set for the steps that need them), "missing"
wheels() {
    [ -n "$WHEELS" ] && { [ "$WHEELS" = ok ]; return; }
    if "$PY" -c "$SESSION_IMPORTS" 2>/dev/null; then
        WHEELS=ok; WHEEL_PATH=${PYTHONPATH:-}; return 0
    fi
    WHEELS=missing
    ls .whl/*.whl >/dev/null 2>&1 || return 1
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
        > "$OUT/wheels.txt" 2>&1 || return 1
    WHEEL_PATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
    PYTHONPATH=$WHEEL_PATH "$PY" -c "$SESSION_IMPORTS" 2>>"$OUT/wheels.txt" || return 1
    WHEELS=ok
}

# run LOG LIMIT CMD...: one command of a step, its output in $OUT/LOG; returns its exit status
run() {
    local log=$1 limit=$2; shift 2
    timeout -k 15 "$limit" "$@" > "$OUT/$log" 2>&1
}
first_failure() { [ "$rc" -eq 0 ] && rc=$1; return 0; }  # a step's status: its first failing command's

gpu_test_files() {  # every test file with a GPU test; $1 = "integrity" for the integrity ones, else the rest
    local f integrity=" tests/test_adversarial.py tests/test_triton_gpu.py "
    for f in tests/test_*.py; do
        grep -q "mark\.gpu" "$f" || continue
        case "$integrity" in *" $f "*) [ "$1" = integrity ] && echo "$f" ;; *) [ "$1" = integrity ] || echo "$f" ;; esac
    done
}

last_line() { grep -v '^[[:space:]]*$' "$1" 2>/dev/null | tail -1 | cut -c1-90; }
pytest_line() { grep -E "[0-9]+ (passed|failed|errors?|skipped|deselected)" "$1" 2>/dev/null | tail -1 | tr -d '=' | sed 's/^ *//' | cut -c1-90; }
sweep_line() {  # rows written, rows not as expected
    local rows miss
    rows=$(wc -l < "$OUT/$1.rows.jsonl" 2>/dev/null || echo 0)
    miss=$(grep -cE '^(MISS|SKIP)' "$OUT/$1.log" 2>/dev/null)
    echo "$rows rows, ${miss:-0} MISS/SKIP (shard $SHARD, $JOBS in flight, ${GPU_MEMORY_GB} GiB cap)"
}

# step NAME: runs it; prints "status<TAB>key figures"
step() {
    local rc=0 name
    case "$1" in
        tests|tests-integrity)
            local kind=engine; [ "$1" = tests-integrity ] && kind=integrity
            local xdist=()  # one line per test as it ends (-v): a step cut short still says which passed
            [ "$TEST_WORKERS" -gt 0 ] && "$PY" -c "import xdist" 2>/dev/null && xdist=(-n "$TEST_WORKERS")
            wheels  # tests that drive a session (scripted replies through the real SDKs) need them
            # shellcheck disable=SC2046
            run "$1.log" "$STEP_LIMIT" env PYTHONPATH="$WHEEL_PATH" "$PY" -m pytest -v -p no:cacheprovider -m gpu -rfE \
                --tb=short --durations=10 "${xdist[@]}" ${TESTS_K:+-k "$TESTS_K"} $(gpu_test_files $kind); rc=$?
            printf '%s\t%s\n' "$(status $rc)" "$(pytest_line "$OUT/$1.log")" ;;
        examples)
            run examples.log "$((STEP_LIMIT - 30))" "$PY" bench/gpu_examples.py --formats nvrtc,inline \
                --json "$OUT/examples.json" --parallel 8; rc=$?
            run doctor.log 30 "$PY" -m cudaforge.engine.cli doctor || first_failure $?
            printf '%s\t%s\n' "$(status $rc)" "$(last_line "$OUT/examples.log")" ;;
        latency)
            # The rounds get all but SPARE_WAIT_S of the step: on a slower machine the 7 rounds ran past half of a
            # 190 s step before their table (session 42); spare_wait's own target is under 60 s.
            local spare_s=${SPARE_WAIT_S:-60} rounds_s
            if [ "$STEP_LIMIT" -gt $((2 * spare_s)) ]; then rounds_s=$((STEP_LIMIT - spare_s))
            else rounds_s=$((STEP_LIMIT / 2)); spare_s=$rounds_s; fi
            run latency.log "$rounds_s" "$PY" bench/round_latency.py --formats nvrtc --naive "" \
                --ours relu,softmax,layernorm,matmul,maxpool2d,gelu,gemm_epilogue --json "$OUT/round_latency.json"; rc=$?
            local row figures
            row=$(grep -m1 '^| nvrtc | ours |' "$OUT/latency.log")
            figures=$(awk -F'|' '{gsub(/ /, ""); printf "nvrtc round %s s, %s s without profile", $10, $11}' <<< "$row")
            if [ "$WHEELS" = ok ]; then
                run spare_wait.log "$spare_s" env PYTHONPATH="$WHEEL_PATH" "$PY" bench/spare_wait.py --skip-throughput \
                    --json "$OUT/spare_wait.json" || first_failure $?
                figures="$figures; spare_wait: $(grep -c '^| [0-9]' "$OUT/spare_wait.log") rounds"
            else
                figures="$figures; spare_wait skipped (no wheels in .whl/)"
            fi
            printf '%s\t%s\n' "$(status $rc)" "$figures" ;;
        spares)
            if [ "$WHEELS" != ok ]; then printf 'skipped\tno wheels in .whl/\n'; return; fi
            local n failed=0 waits=""
            for n in 1 2; do
                run "spares-$n.log" "$((STEP_LIMIT / 2))" env PYTHONPATH="$WHEEL_PATH" "$PY" bench/spare_wait.py \
                    --skip-throughput --rounds "${SPARE_ROUNDS:-8}" --wall-s 90 --json "$OUT/spares-$n.json" \
                    || first_failure $?
                failed=$((failed + $(grep -c 'profile failed' "$OUT/spares-$n.log")))
                waits="$waits $(grep -o 'median [0-9.]* s, max [0-9.]* s' "$OUT/spares-$n.log" | tr -d ',')"
            done
            printf '%s\t%s\n' "$( [ "$failed" = 0 ] && status "$rc" || echo 'fail(profiles)')" \
                "spare wait (2 sessions):$waits; failed profiles $failed" ;;
        fidelity|fidelity-nocover)
            local suffix="" cover=()  # fidelity-nocover: the same bench with the flush alone, its own files
            [ "$1" = fidelity-nocover ] && suffix=-nocover && cover=(--no-launch-cover)
            # shellcheck disable=SC2086
            run "fidelity$suffix.log" "$STEP_LIMIT" "$PY" bench/timing_fidelity.py --parallel "$JOBS" "${cover[@]}" \
                $FIDELITY_ARGS --json "$OUT/timing_fidelity$suffix.json"; rc=$?
            printf '%s\t%s\n' "$(status $rc)" "$(last_line "$OUT/fidelity$suffix.log")" ;;
        cover)
            run cover.log "$STEP_LIMIT" "$PY" -m pytest -v -p no:cacheprovider -m gpu -rfE --tb=short \
                -k "loaded_hosts_delay or is_counted_late or quick_now_and_then or between_windows_holding_nothing" \
                tests/test_launch_cover.py tests/test_kernel_timer.py tests/test_gpu_rwlock.py; rc=$?
            printf '%s\t%s\n' "$(status $rc)" "$(pytest_line "$OUT/cover.log")" ;;
        adversarial)
            run adversarial.log "$STEP_LIMIT" "$PY" bench/adversarial_table.py --parallel "$JOBS" \
                --json "$OUT/adversarial.json"; rc=$?
            printf '%s\t%s\n' "$(status $rc)" "$(grep -m1 'as expected' "$OUT/adversarial.log" | cut -c1-90)" ;;
        triton)
            run triton.log "$STEP_LIMIT" "$PY" bench/triton_gpu.py --json "$OUT/triton_gpu.json"; rc=$?
            printf '%s\t%s\n' "$(status $rc)" "$(grep -m1 '^accepted' "$OUT/triton.log" | cut -c1-90)" ;;
        sweep-level[123]|sweep-all|sweep-recheck|window-stacks|rnn-alone)
            [ -n "$KB" ] || { printf 'skipped\tno KernelBench folder (carry .kb/ or set KERNELBENCH_DIR)\n'; return; }
            name=$1; [ "$SHARD" != 1/1 ] && name="$1-${SHARD/\//of}"
            local which=(--levels "${1#sweep-level}")
            [ "$1" = sweep-recheck ] && which=(--list bench/lists/sweep-recheck.txt)
            local stacks=""  # the workers' stack samples (engine/worker/stack_samples.py): window-stacks, or STACKS=1
            [ "$1" = window-stacks ] && which=(--list bench/lists/cudnn-windows.txt)
            { [ "$1" = window-stacks ] || [ -n "${STACKS:-}" ]; } && stacks="$OUT/$name.stacks"
            [ "$1" = sweep-all ] && which=(--levels 1,2,3)
            local jobs=$JOBS
            [ "$1" = rnn-alone ] && which=(--list bench/lists/rnn-windows.txt) && jobs=1
            rm -f "$OUT/$name.rows.jsonl" "$OUT/$name.locklog"
            # The GPU's utilization every 0.5 s, and every process's lock events: bench/lock_timeline.py
            # splits the wall into exclusive, drain, shared and idle time from them.
            # Also the bus: PCIe MB/s each way every second (nvidia-smi dmon), to tell whether the large problems'
            # host copies wait for the bus or for the host.
            local smi="" dmon=""
            if command -v nvidia-smi >/dev/null; then
                nvidia-smi --query-gpu=timestamp,utilization.gpu,utilization.memory,memory.used \
                    --format=csv,noheader,nounits -lms 500 > "$OUT/$name.util.csv" 2>/dev/null & smi=$!
                nvidia-smi dmon -s t -d 1 -o T > "$OUT/$name.pcie.txt" 2>/dev/null & dmon=$!
            fi
            # shellcheck disable=SC2086
            run "$name.log" "$STEP_LIMIT" env CUDAFORGE_LOCK_LOG="$OUT/$name.locklog" ${stacks:+CUDAFORGE_STACK_SAMPLES=$stacks} \
                "$PY" bench/kernelbench_sweep.py "$KB" "${which[@]}" \
                --jobs "$jobs" --gpu-memory-gb "$GPU_MEMORY_GB" --shard "$SHARD" --give-up-after 6 \
                ${ORDER_FROM:+--order-from $ORDER_FROM} ${SWEEP_ARGS:-} \
                --json "$OUT/$name.json" --rows "$OUT/$name.rows.jsonl"; rc=$?
            [ -n "$smi" ] && kill "$smi" 2>/dev/null
            [ -n "$dmon" ] && kill "$dmon" 2>/dev/null
            local lock=""  # the timeline's last line, "in brief: ...", for the key figures
            "$PY" bench/lock_timeline.py "$OUT/$name.locklog" --json "$OUT/$name.timeline.json" \
                > "$OUT/$name.timeline.txt" 2>&1 && lock="; $(sed -n 's/^in brief: //p' "$OUT/$name.timeline.txt")"
            # The windows' CUPTI start beside context creations and apart (creations wait for a gap since session 42)
            "$PY" bench/windows_beside_creations.py "$OUT/$name.locklog" "$OUT/$name.rows.jsonl" \
                > "$OUT/$name.creations.txt" 2>&1
            local util
            util=$(awk -F', *' 'NF >= 2 && $2 ~ /^[0-9]+$/ {s += $2; n++} END {if (n) printf "; GPU busy %.0f %%", s / n}' \
                "$OUT/$name.util.csv" 2>/dev/null)
            local held=""
            if [ -n "$stacks" ]; then
                "$PY" bench/stack_summary.py "$stacks" --hold write > "$OUT/$name.stacks.txt" 2>&1
                held="; $(last_line "$OUT/$name.stacks.txt")"
            fi
            local bus  # the busiest second each way, and the mean (dmon's rxpci, txpci columns: MB/s)
            bus=$(awk '$1 !~ /^#/ && NF >= 4 && $3 ~ /^[0-9]+$/ {n++; r += $3; t += $4; if ($3 > mr) mr = $3; if ($4 > mt) mt = $4}
                END {if (n) printf "; PCIe to the GPU %.1f GB/s mean, %.1f max; from it %.1f mean, %.1f max", r / n / 1000, mr / 1000, t / n / 1000, mt / 1000}' \
                "$OUT/$name.pcie.txt" 2>/dev/null)
            printf '%s\t%s\n' "$(status $rc)" "$(sweep_line "$name")$util$bus${lock:-}$held" ;;
        batch)
            [ -n "$KB" ] || { printf 'skipped\tno KernelBench folder (carry .kb/ or set KERNELBENCH_DIR)\n'; return; }
            [ "$WHEELS" = ok ] || { printf 'skipped\tneeds openai & co.: carry the wheels in .whl/\n'; return; }
            run batch.log "$STEP_LIMIT" env PYTHONPATH="$WHEEL_PATH" "$PY" bench/batch_largest.py --folder "$KB" --out "$OUT/batch" \
                --gpu-memory-gb "$GPU_MEMORY_GB"; rc=$?
            printf '%s\t%s\n' "$(status $rc)" "$(grep -m1 '^batch of' "$OUT/batch.log" | sed 's/.*: //' | cut -c1-90)" ;;
        tui)
            [ "$WHEELS" = ok ] || { printf 'skipped\tneeds textual & co.: carry the wheels in .whl/\n'; return; }
            run tui.log "$STEP_LIMIT" env PYTHONPATH="$WHEEL_PATH" "$PY" bench/workbench_session.py "$OUT/screenshot.svg" --story \
                --copy-run "$OUT/tui_run.tgz"; rc=$?
            printf '%s\t%s\n' "$(status $rc)" "$(grep -m1 'key-press-to-render' "$OUT/tui.log" | cut -c1-90)" ;;
        sol)
            [ -f bench/speed_of_light.py ] || { printf 'skipped\tbench/speed_of_light.py is not in this checkout\n'; return; }
            run sol.log "$STEP_LIMIT" "$PY" bench/speed_of_light.py ${KB:+--kernelbench "$KB"} --first 20 --start "$SOL_START" \
                ${SOL_NO_EXAMPLES:+--no-examples} --parallel "$JOBS" --json "$OUT/speed_of_light.json" \
                --rows "$OUT/sol.rows.jsonl"; rc=$?
            printf '%s\t%s\n' "$(status $rc)" "$(last_line "$OUT/sol.log")" ;;
        peak-trace)
            [ -n "$KB" ] || { printf 'skipped\tno KernelBench folder (carry .kb/ or set KERNELBENCH_DIR)\n'; return; }
            run peak_trace.log "$STEP_LIMIT" "$PY" bench/peak_trace.py "$KB/${TRACE_PROBLEM:-level1/97_ScaledDotProductAttention}.py" \
                --gpu-memory-gb "$GPU_MEMORY_GB" --out "$OUT/peak_trace"; rc=$?
            printf '%s\t%s\n' "$(status $rc)" "$(grep -m1 '^ratio' "$OUT/peak_trace.log" | cut -c1-90)" ;;
        ncu-cost)
            run ncu_cost.log "$STEP_LIMIT" "$PY" bench/ncu_cost.py --json "$OUT/ncu_cost.json"; rc=$?
            printf '%s\t%s\n' "$(status $rc)" "$(grep -m1 '^| cudaforge' "$OUT/ncu_cost.log" | cut -c1-90)" ;;
        event-gap)
            run event_gap.log "$STEP_LIMIT" "$PY" bench/event_gap.py --json "$OUT/event_gap.json"; rc=$?
            printf '%s\t%s\n' "$(status $rc)" "$(grep -m1 '^| window | candidate' "$OUT/event_gap.log" | cut -c1-90)" ;;
        launch-path)
            # 8 processes (allocator setting x fresh or forked as the zygote's spares, twice each) x every CPU,
            # then busy neighbours of CPUs 0 and 8
            run launch-path.log "$STEP_LIMIT" "$PY" bench/launch_path.py --processes 8 --alloc-ab --fork-ab --pairs 0,8 \
                --json "$OUT/launch_path.json"; rc=$?
            printf '%s\t%s\n' "$(status $rc)" "$(grep -m1 '^spread' "$OUT/launch-path.log" | cut -c1-90)" ;;
        ncu-spares)
            run ncu_spares.log "$STEP_LIMIT" "$PY" bench/ncu_spares.py --json "$OUT/ncu_spares.json"; rc=$?
            printf '%s\t%s\n' "$(status $rc)" "$(last_line "$OUT/ncu_spares.log")" ;;
        disturbance)
            # shellcheck disable=SC2086
            run disturbance.log "$STEP_LIMIT" "$PY" bench/window_disturbance.py ${DISTURBANCE_ARGS:-} \
                --json "$OUT/window_disturbance.json"; rc=$?
            printf '%s\t%s\n' "$(status $rc)" "$(grep -E '^\| (spare-)?context' "$OUT/disturbance.log" | cut -c1-90 | tr '\n' ' ')" ;;
        host-copy)
            run host_copy.log "$STEP_LIMIT" "$PY" bench/host_copy_bench.py --gib 2 --json "$OUT/host_copy.json"; rc=$?
            printf '%s\t%s\n' "$(status $rc)" "$(last_line "$OUT/host_copy.log")" ;;
    esac
}

status() {
    case "$1" in 0) echo ok ;; 124|137) echo timeout ;; *) echo "fail($1)" ;; esac
}

failed=0
limit_for() {  # the step's own limit from STEP_LIMITS, else the default (STEP_LIMIT as given)
    local kv
    for kv in $STEP_LIMITS; do [ "${kv%%=*}" = "$1" ] && { echo "${kv#*=}"; return; }; done
    echo "$DEFAULT_LIMIT"
}

DEFAULT_LIMIT=$STEP_LIMIT
for s in "$@"; do
    t0=$SECONDS
    STEP_LIMIT=$(limit_for "$s")
    echo "== $s ($(date -u +%H:%M:%S))"
    grep "^$s|" <<< "$STEPS" | cut -d'|' -f3 | grep -q wheels && { wheels || true; }  # here: steps run in a subshell
    result=$(step "$s")
    case "$result" in *$'\t') result="$result-" ;; esac  # no key figures: a placeholder keeps the columns
    printf '%s\t%s\t%s\n' "$s" "$result" "$((SECONDS - t0))" >> "$SUMMARY"
    case "$result" in ok*|skipped*) ;; *) failed=1 ;; esac
done

echo
echo "gpu_check: logs in $OUT"
printf '%-16s %-10s %-8s %s\n' step status seconds "key figures"
while IFS=$'\t' read -r name st figures secs; do  # (tabs are IFS white space: no field may be empty)
    [ "$figures" = - ] && figures=""
    printf '%-16s %-10s %-8s %s\n' "$name" "$st" "$secs" "$figures"
done < "$SUMMARY"
exit "$failed"
