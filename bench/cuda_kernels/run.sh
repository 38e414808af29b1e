#!/usr/bin/env bash
# The CUDA matmul kernels on a machine with an NVIDIA GPU (the lent H200), in about 2-3 minutes:
#   1. dot_host_test      integer chunk dots == CPU scalar dots, every format (host only)      -> dot_host.log
#   2. cuda_ops_test      every op CUDA vs CPU; matmul T = 1..8, 19 and grouped expert pairs    -> ops.json, ops.log
#   3. cuda_matmul_speed  the current kernels                                                  -> speed_after.json
#      and with STRATA_CUDA_T1_ROWS=1 (decode matmuls 4 rows per warp, the A/B switch)          -> speed_t1rows.json
#   4. the same benchmark linked with baseline_matmul.cu (the kernels before the dp4a work)    -> speed_before.json
#   5. compare.py         before / after side by side (and default / T1_ROWS)                  -> compare*.txt
# usage: OUT=dir bash bench/cuda_kernels/run.sh     (BUILD: build dir, default build-gpu, shared with tests/gpu/run.sh;
#        BEFORE=0 skips steps 4-5)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-bench/cuda_kernels/results/latest}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/machine.txt"
GEN=$(command -v ninja >/dev/null && echo "-G Ninja" || echo "")
status=0

echo "== build ($(date +%T))"
cmake -S . -B "$BUILD" $GEN -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" -j "$(nproc)" --target dot_host_test cuda_ops_test cuda_matmul_speed >>"$OUT/build.log" 2>&1 ||
  { tail -30 "$OUT/build.log"; echo "build FAILED"; exit 1; }
BIN="$BUILD/engine"

# The baseline benchmark binary: old matmul.cu + the current benchmark and strata_core (built in the background).
if [ "${BEFORE:-1}" = 1 ]; then
  (mkdir -p /tmp/strata-before &&
   cp bench/cuda_kernels/baseline_matmul.cu /tmp/strata-before/matmul.cu &&
   cp engine/src/backend/cuda/kernels/quant_formats.cuh /tmp/strata-before/ &&
   nvcc -DSTRATA_HAVE_CUDA=1 -Iengine/src -O3 -DNDEBUG -arch=sm_90 -std=c++17 -x cu -c /tmp/strata-before/matmul.cu \
        -o /tmp/strata-before/matmul.o &&
   nvcc -arch=sm_90 "$(find "$BUILD/engine/CMakeFiles/cuda_matmul_speed.dir" -name 'cuda_matmul_speed.*.o' | head -1)" \
        /tmp/strata-before/matmul.o "$BUILD/engine/libstrata_core.a" -o /tmp/strata-before/cuda_matmul_speed -lpthread) \
    > "$OUT/build_before.log" 2>&1 &
  before_pid=$!
fi

echo "== dot_host_test ($(date +%T))"
timeout 60 "$BIN/dot_host_test" > "$OUT/dot_host.log" 2>&1 || status=1
tail -1 "$OUT/dot_host.log"

echo "== cuda_ops_test ($(date +%T))"
timeout 180 "$BIN/cuda_ops_test" "$OUT/ops.json" > "$OUT/ops.log" 2>&1 || status=1
grep -E "FAIL|error" "$OUT/ops.log" | head -20
tail -1 "$OUT/ops.log"
STRATA_CUDA_T1_ROWS=1 timeout 180 "$BIN/cuda_ops_test" "$OUT/ops_t1rows.json" > "$OUT/ops_t1rows.log" 2>&1 || status=1
echo "with STRATA_CUDA_T1_ROWS=1: $(tail -1 "$OUT/ops_t1rows.log")"

echo "== cuda_matmul_speed, current kernels ($(date +%T))"
timeout 120 "$BIN/cuda_matmul_speed" "$OUT/speed_after.json" > "$OUT/speed_after.log" 2>&1 || status=1
tail -3 "$OUT/speed_after.log"
echo "== cuda_matmul_speed, STRATA_CUDA_T1_ROWS=1 ($(date +%T))"
STRATA_CUDA_T1_ROWS=1 timeout 120 "$BIN/cuda_matmul_speed" "$OUT/speed_t1rows.json" > "$OUT/speed_t1rows.log" 2>&1 || status=1
python3 bench/cuda_kernels/compare.py "$OUT/speed_after.json" "$OUT/speed_t1rows.json" > "$OUT/compare_t1rows.txt"
grep -E "T=1" "$OUT/compare_t1rows.txt" | head -40

if [ "${BEFORE:-1}" = 1 ]; then
  echo "== cuda_matmul_speed, baseline kernels ($(date +%T))"
  if wait "$before_pid"; then
    timeout 120 /tmp/strata-before/cuda_matmul_speed "$OUT/speed_before.json" > "$OUT/speed_before.log" 2>&1 || status=1
    python3 bench/cuda_kernels/compare.py "$OUT/speed_before.json" "$OUT/speed_after.json" | tee "$OUT/compare.txt"
  else
    tail -20 "$OUT/build_before.log"; echo "baseline build FAILED"
  fi
fi
echo "== done ($(date +%T)), status $status"
exit $status
