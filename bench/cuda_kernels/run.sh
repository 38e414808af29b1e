#!/usr/bin/env bash
# The CUDA matmul kernels on a machine with an NVIDIA GPU (the lent H200), in about 2-3 minutes:
#   1. dot_host_test      integer chunk dots == CPU scalar dots, every format (host only)      -> dot_host.log
#   2. cuda_ops_test      every op CUDA vs CPU; matmul T = 1..8, 19 and grouped expert pairs    -> ops.json, ops.log
#      moe_gate_up_test   the fused expert gate/up/swiglu kernel vs matmul + matmul + swiglu    -> moe_gate_up.log
#                         (again with STRATA_CUDA_T1_ROWS=1                                     -> ops_t1rows.*)
#   3. cuda_matmul_speed  the current kernels                                                  -> speed_after.json
#                         with STRATA_CUDA_T1_ROWS=1 (decode 4 rows per warp, an A/B switch)   -> speed_t1rows.json
#   4. compare.py         default / T1_ROWS side by side                                 -> compare_t1rows.txt
# The kernels before the dp4a work are in git history (commit 2d890ce); their speeds on the H200 are in
# tests/gpu/results/2026-11-29/speed.json, the new ones in tests/gpu/results/2026-11-29-round2/speed.json.
# The benchmark and dot_host_test are built here with nvcc from matmul.cu and strata_core only, so they do not
# depend on the rest of the CUDA backend building; cuda_ops_test needs the whole backend (cmake, in $BUILD).
# usage: OUT=dir bash bench/cuda_kernels/run.sh     (BUILD: cmake dir, default build-gpu, shared with tests/gpu/run.sh)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-bench/cuda_kernels/results/latest}
BUILD=${BUILD:-build-gpu}
TMP=/tmp/strata-kernels
mkdir -p "$OUT" "$TMP/after"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/machine.txt"
GEN=$(command -v ninja >/dev/null && echo "-G Ninja" || echo "")
NVCC="nvcc -DSTRATA_HAVE_CUDA=1 -Iengine/src -Itests/gpu -O3 -DNDEBUG -arch=sm_90 -std=c++17"
status=0

echo "== build ($(date +%T))"
cmake -S . -B "$BUILD" $GEN -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" -j "$(nproc)" --target strata_core >>"$OUT/build.log" 2>&1 ||
  { tail -30 "$OUT/build.log"; echo "build of strata_core FAILED"; exit 1; }
CORE="$BUILD/engine/libstrata_core.a"
$NVCC -x cu -c engine/src/backend/cuda/kernels/matmul.cu -o "$TMP/after/matmul.o" > "$OUT/build_after.log" 2>&1 &
p1=$!
$NVCC -x cu -c tests/gpu/cuda_matmul_speed.cu -o "$TMP/speed.o" > "$OUT/build_speed.log" 2>&1 &
p3=$!
$NVCC -x cu -c tests/gpu/moe_gate_up_test.cu -o "$TMP/moe_gate_up_test.o" > "$OUT/build_moe_gate_up.log" 2>&1 &
p6=$!
$NVCC tests/gpu/dot_host_test.cu "$CORE" -o "$TMP/dot_host_test" -lpthread > "$OUT/build_dot.log" 2>&1 &
p4=$!
cmake --build "$BUILD" -j "$(nproc)" --target cuda_ops_test > "$OUT/build_ops.log" 2>&1 &
p5=$!
ok_after=0
wait $p3 && wait $p1 && nvcc -arch=sm_90 "$TMP/speed.o" "$TMP/after/matmul.o" "$CORE" -o "$TMP/after/cuda_matmul_speed" \
  -lpthread >> "$OUT/build_after.log" 2>&1 && ok_after=1
wait $p6 && nvcc -arch=sm_90 "$TMP/moe_gate_up_test.o" "$TMP/after/matmul.o" "$CORE" -o "$TMP/moe_gate_up_test" \
  -lpthread >> "$OUT/build_moe_gate_up.log" 2>&1 || { tail -20 "$OUT/build_moe_gate_up.log"; status=1; }
wait $p4 || { tail -20 "$OUT/build_dot.log"; status=1; }
wait $p5 || { tail -20 "$OUT/build_ops.log"; echo "cuda_ops_test did not build (see build_ops.log)"; status=1; }
[ $ok_after = 1 ] || { tail -20 "$OUT/build_after.log"; echo "current kernels did not build"; exit 1; }
echo "built ($(date +%T))"

echo "== dot_host_test"
timeout 60 "$TMP/dot_host_test" > "$OUT/dot_host.log" 2>&1 || status=1
tail -1 "$OUT/dot_host.log"

if [ -x "$BUILD/engine/cuda_ops_test" ]; then
  echo "== cuda_ops_test ($(date +%T))"
  timeout 180 "$BUILD/engine/cuda_ops_test" "$OUT/ops.json" > "$OUT/ops.log" 2>&1 || status=1
  grep -E "FAIL|error" "$OUT/ops.log" | head -20
  tail -1 "$OUT/ops.log"
  STRATA_CUDA_T1_ROWS=1 timeout 180 "$BUILD/engine/cuda_ops_test" "$OUT/ops_t1rows.json" > "$OUT/ops_t1rows.log" 2>&1 || status=1
  grep -E "FAIL|error" "$OUT/ops_t1rows.log" | head -10
  echo "with STRATA_CUDA_T1_ROWS=1: $(tail -1 "$OUT/ops_t1rows.log")"
fi

echo "== moe_gate_up_test ($(date +%T))"
timeout 60 "$TMP/moe_gate_up_test" > "$OUT/moe_gate_up.log" 2>&1 || status=1
grep -E "FAIL|error" "$OUT/moe_gate_up.log" | head; tail -1 "$OUT/moe_gate_up.log"

echo "== cuda_matmul_speed, current kernels ($(date +%T))"
timeout 120 "$TMP/after/cuda_matmul_speed" "$OUT/speed_after.json" > "$OUT/speed_after.log" 2>&1 || status=1
tail -2 "$OUT/speed_after.log"
echo "== cuda_matmul_speed, STRATA_CUDA_T1_ROWS=1 ($(date +%T))"
STRATA_CUDA_T1_ROWS=1 timeout 120 "$TMP/after/cuda_matmul_speed" "$OUT/speed_t1rows.json" > "$OUT/speed_t1rows.log" 2>&1 || status=1
python3 bench/cuda_kernels/compare.py "$OUT/speed_after.json" "$OUT/speed_t1rows.json" > "$OUT/compare_t1rows.txt" &&
  grep -E "T=1" "$OUT/compare_t1rows.txt" | head -40
echo "== done ($(date +%T)), status $status"
exit $status
