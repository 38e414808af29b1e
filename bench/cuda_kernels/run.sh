#!/usr/bin/env bash
# The CUDA decode matmuls on a machine with an NVIDIA GPU (the lent H200), about 60-90 s with BUILD already built:
#   1. moe_decode_test    two-launch decode experts == the separate kernels, split-K T = 1 == T = 2 -> moe_decode.log
#      moe_gate_up_test   the fused expert gate/up/swiglu kernel vs matmul + matmul + swiglu       -> moe_gate_up.log
#   2. cuda_matmul_speed --decode: the decode pass's dense shapes (GDN in_proj as one matrix, ssm_out, hc_down, F32
#      router, BF16; T = 1, 2, 4, 8) and the MoE calls (routed top-10 T = 1, shared expert T = 1..8) per format mix
#         current default                                                 -> speed_decode.json / .log
#         STRATA_CUDA_MOE_DECODE=0 STRATA_CUDA_SPLITK=0 (kernels before)   -> speed_decode_before.json / .log
#   3. compare.py before / after side by side                             -> compare_decode.txt (printed)
#   4. --decode with STRATA_CUDA_T1_ROWS=1 (4 rows per warp) and with STRATA_CUDA_T1_STAGED=0 (the general kernel
#      instead of rows staged in shared memory by 16-byte loads, the default for many rows since 2026-12-04), each
#      against the default -> compare_t1_rows_1.txt, compare_t1_staged_0.txt
# FULL=1 also runs the whole benchmark (big matrices, dense, experts, prompt; ~2 min) -> speed_full.json.
# cuda_ops_test (every op CUDA vs CPU) is the lead's separate step (tests/gpu/run.sh, round.sh).
# usage: OUT=dir bash bench/cuda_kernels/run.sh [BUILD_DIR]   (default build-gpu: cmake -DSTRATA_CUDA=ON, built)
set -u
cd "$(dirname "$0")/../.."
BUILD=${1:-${BUILD:-build-gpu}}
OUT=${OUT:-bench/cuda_kernels/results/latest}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/machine.txt"
status=0

echo "== build ($(date +%T))"
cmake --build "$BUILD" -j "$(nproc)" --target cuda_matmul_speed moe_decode_test moe_gate_up_test > "$OUT/build.log" 2>&1 ||
  { tail -30 "$OUT/build.log"; echo "build FAILED"; exit 1; }
BIN=$BUILD/engine

echo "== moe_decode_test ($(date +%T)), also with STRATA_CUDA_T1_ROWS=1 and STRATA_CUDA_T1_STAGED=0"
for v in "" T1_ROWS=1 T1_STAGED=0; do
  log=$OUT/moe_decode${v:+_${v/=/_}}.log
  env ${v:+STRATA_CUDA_$v} timeout 60 "$BIN/moe_decode_test" ${v:+--t1} > "$log" 2>&1 || status=1
  grep -E "FAIL|error" "$log" | head -20
  echo "${v:-default}: $(tail -1 "$log")"
done
echo "== moe_gate_up_test ($(date +%T))"
timeout 30 "$BIN/moe_gate_up_test" > "$OUT/moe_gate_up.log" 2>&1 || status=1
grep -E "FAIL|error" "$OUT/moe_gate_up.log" | head; tail -1 "$OUT/moe_gate_up.log"

echo "== cuda_matmul_speed --decode ($(date +%T))"
timeout 60 "$BIN/cuda_matmul_speed" "$OUT/speed_decode.json" --decode > "$OUT/speed_decode.log" 2>&1 || status=1
tail -2 "$OUT/speed_decode.log"
echo "== the same with STRATA_CUDA_MOE_DECODE=0 STRATA_CUDA_SPLITK=0 ($(date +%T))"
STRATA_CUDA_MOE_DECODE=0 STRATA_CUDA_SPLITK=0 timeout 60 "$BIN/cuda_matmul_speed" "$OUT/speed_decode_before.json" \
  --decode > "$OUT/speed_decode_before.log" 2>&1 || status=1
python3 bench/cuda_kernels/compare.py "$OUT/speed_decode_before.json" "$OUT/speed_decode.json" \
  > "$OUT/compare_decode.txt" 2>&1 && grep -E "^(group|decode|moe)" "$OUT/compare_decode.txt" | grep -E "group|T=1|moe"
for v in T1_ROWS=1 T1_STAGED=0; do   # the other T = 1 kernels for many rows, each against the default
  lower=$(echo "${v/=/_}" | tr 'A-Z' 'a-z')
  echo "== the same with STRATA_CUDA_$v ($(date +%T))"
  env "STRATA_CUDA_$v" timeout 60 "$BIN/cuda_matmul_speed" "$OUT/speed_decode_$lower.json" --decode \
    > "$OUT/speed_decode_$lower.log" 2>&1 || status=1
  python3 bench/cuda_kernels/compare.py "$OUT/speed_decode.json" "$OUT/speed_decode_$lower.json" \
    > "$OUT/compare_$lower.txt" 2>&1 && grep -E "^decode .*T=1 " "$OUT/compare_$lower.txt"
done

if [ "${FULL:-0}" = 1 ]; then
  echo "== cuda_matmul_speed, all groups ($(date +%T))"
  timeout 240 "$BIN/cuda_matmul_speed" "$OUT/speed_full.json" > "$OUT/speed_full.log" 2>&1 || status=1
  tail -2 "$OUT/speed_full.log"
fi
echo "== done ($(date +%T)), status $status"
exit $status
