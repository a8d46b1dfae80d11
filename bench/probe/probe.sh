#!/bin/bash
# First H200 probe: versions, NVRTC wrapper source, ncu metric availability and raw CSV fixtures.
set -x
cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
python3 -c "import torch,sys;print(sys.version);print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(), torch.cuda.get_device_capability())"
which ncu nvcc compute-sanitizer; ncu --version; nvcc --version | tail -2
python3 -c "import cuda.core, cuda.bindings; print('cuda.core', cuda.core.__version__)"
python3 - <<'PY' > $OUT/torch_cuda_utils.txt
import inspect, torch, torch.cuda._utils as u
print(inspect.getsource(torch.cuda._compile_kernel))
print(inspect.getsource(u))
PY
ncu --query-metrics --chip gh100 > $OUT/query_metrics_gh100.txt 2>&1; wc -l $OUT/query_metrics_gh100.txt
M=sm__cycles_active.avg,sm__warps_active.avg.pct_of_peak_sustained_active,launch__occupancy_limit_blocks,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,launch__registers_per_thread,sm__inst_executed.sum,sm__inst_executed_pipe_fp32.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes.sum.per_second,gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed,l1tex__t_sector_hit_rate.pct,l1tex__throughput.avg.pct_of_peak_sustained_active,lts__t_sector_hit_rate.pct,lts__throughput.avg.pct_of_peak_sustained_active,smsp__warp_issue_stalled_memory_dependency_per_warp_active.pct,smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_branch_resolving_per_warp_active.pct,smsp__sass_average_branch_targets_threads_uniform.pct,gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed
M2=$M,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__pipe_fp32_cycles_active.avg.pct_of_peak_sustained_active,smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct,smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,sm__warps_active.avg.per_cycle_active,sm__maximum_warps_per_active_cycle_pct,launch__grid_size,launch__block_size,launch__shared_mem_per_block_dynamic,launch__shared_mem_per_block_static,launch__waves_per_multiprocessor,launch__occupancy_per_block_size,sm__sass_thread_inst_executed_op_ffma_pred_on.sum,sm__sass_thread_inst_executed_op_fadd_pred_on.sum,sm__sass_thread_inst_executed_op_fmul_pred_on.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,sm__ops_path_tensor_src_fp16_dst_fp32.sum,sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active
start=$(date +%s.%N)
ncu --clock-control none --nvtx --nvtx-include "candidate/" --metrics $M2 --csv --page raw --launch-count 10 python3 ncu_fixtures.py > $OUT/ncu_raw_three_kernels.csv 2> $OUT/ncu_stderr.txt
echo "ncu rc=$? wall=$(echo "$(date +%s.%N) - $start" | bc)"
head -c 3000 $OUT/ncu_raw_three_kernels.csv; cat $OUT/ncu_stderr.txt | tail -20
# A failed profile: the target crashes (python raising)
ncu --clock-control none --csv --page raw python3 -c "import torch; x=torch.ones(4,device='cuda'); raise SystemExit(3)" > $OUT/ncu_raw_failed_target.csv 2>&1; echo "failed rc=$?"
ncu --clock-control none --csv --page raw --metrics gpu__time_duration.sum,not__a_metric.sum python3 ncu_fixtures.py > $OUT/ncu_raw_bad_metric.csv 2>&1; echo "badmetric rc=$?"
# timing of a process start and NVRTC compile on 2.11
python3 - <<'PY'
import time, torch
t=time.perf_counter(); torch.zeros(1,device='cuda'); torch.cuda.synchronize(); print('cuda init', time.perf_counter()-t)
src='extern "C" __global__ void k(float*x,int n){int i=blockIdx.x*blockDim.x+threadIdx.x;if(i<n)x[i]*=2;}'
t=time.perf_counter(); f=torch.cuda._compile_kernel(src,'k'); print('nvrtc', time.perf_counter()-t, type(f), [a for a in dir(f) if not a.startswith('__')])
PY
