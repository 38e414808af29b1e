#!/usr/bin/env bash
# Why the largest decode kernels run below HBM speed: Nsight Compute's speed-of-light, occupancy, launch, warp-state
# (stall reasons) and memory sections for one launch of each, taken inside the second decode pass of the synthetic
# model (ops issued directly, caches as the previous kernel left them). Pairs with tests/gpu/kernel_times.py (the
# time of every kernel of a pass). ~15 s a kernel.
# usage: OUT=dir bash tests/gpu/kernel_detail.sh BUILD_DIR SYN.gguf   -> $OUT/detail_<kernel>.txt
set -u
cd "$(dirname "$0")/../.."
BIN=${1:-build-gpu}/engine/strata
MODEL=${2:-/tmp/syn-q2_0.gguf}
OUT=${OUT:-tests/gpu/results/latest}
mkdir -p "$OUT"
# kernel name regex : matching launches to skip (past the first pass; per pass: hyper_read 97, matmul_q8 49, ...)
for spec in hr_down_kernel:100 hr_mix_kernel:100 moe_gate_up_q8h_kernel:50 moe_down_combine_kernel:50 \
            matmul_q8_staged_kernel:50 matmul_q8_splitk_kernel:75 recurrent_gated_split_kernel:37 \
            route_topk_reg_kernel:50; do
  name=${spec%%:*}; skip=${spec#*:}
  STRATA_CUDA_GRAPHS=0 timeout 120 ncu --clock-control none --cache-control none -k "regex:$name" -s "$skip" -c 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section SchedulerStats \
    "$BIN" generate --backend cuda --model "$MODEL" --prompt-ids 1000 -n 3 --ignore-eos > "$OUT/detail_$name.txt" 2>&1
  echo "$name: rc $? $(grep -E 'Duration|Memory Throughput|Achieved Occupancy|Registers Per' "$OUT/detail_$name.txt" | tr -s ' ' | tr '\n' ';' | cut -c1-300)"
done
