#!/usr/bin/env bash
# The GPU checks, on a machine with an NVIDIA GPU (the lent H200): builds the engine with CUDA (sm_90), then runs
#   decode_host_test   CUDA block decoders == CPU dequantizers, bit for bit (host only)
#   cuda_ops_test      every Backend op, CUDA vs CPU, random inputs, all weight formats      -> ops.json
#   parity.py          whole tiny models, 64 greedy tokens, CUDA vs CPU tokens and logits   -> parity.json
#   cache_parity.py    the same with an expert cache of 0/30/100% of the experts (CPU misses) -> cache_parity.json
#   serve_greedy_check.py  greedy tokens through `strata --serve` (the backend's argmax op), CUDA vs CPU -> serve_greedy.txt
#   compute-sanitizer  memcheck (with leak check) on strata generate (also with a 30% expert cache that moves
#                      experts) and on cuda_ops_test                                     -> sanitizer.log
#   cuda_matmul_speed  matmul GB/s: 512 MB matrices at T = 1..8, real dense and expert shapes -> speed.json
# Results go to $OUT (default tests/gpu/results/latest); summary.json says which steps passed.
# SKIP_SANITIZER=1 skips memcheck (minutes) in a round that has no time for it.
# usage: tests/gpu/run.sh [MODELS_DIR]    (MODELS_DIR from tests/gpu/prepare_models.py, default .gpu-models)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-tests/gpu/results/latest}
MODELS=${1:-.gpu-models}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT"
declare -A STEP
step() { echo; echo "== $1 ($(date +%T))"; }
record() { STEP[$1]=$2; echo "-- $1: $2"; }

step machine
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
nvcc --version | tail -2 | head -1
cmake --version | head -1
GEN=$(command -v ninja >/dev/null && echo "-G Ninja" || echo "")

step build
if [ -n "${PREBUILT:-}" ] && [ -x "$BUILD/engine/cuda_ops_test" ]; then
  record build ok   # tests/gpu/round.sh PREBUILT: the executables were built elsewhere and copied to $BUILD/engine
elif cmake -S . -B "$BUILD" $GEN -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/build.log" 2>&1 &&
   cmake --build "$BUILD" -j "$(nproc)" --target strata decode_host_test cuda_ops_test cuda_matmul_speed >>"$OUT/build.log" 2>&1; then
  record build ok
else
  tail -40 "$OUT/build.log"; record build FAIL
  exit 1
fi
BIN="$BUILD/engine"

step decode_host_test
timeout 60 "$BIN/decode_host_test" | tail -1 && record decode_host ok || record decode_host FAIL

step cuda_ops_test
timeout 180 "$BIN/cuda_ops_test" "$OUT/ops.json" > "$OUT/ops.log" 2>&1 && record ops ok || record ops FAIL
grep -E "FAIL|error|device|checks" "$OUT/ops.log" | head -40

step parity
PYTHONUNBUFFERED=1 timeout 300 python3 tests/gpu/parity.py --strata "$BIN/strata" --models "$MODELS" --out "$OUT/parity.json" &&
  record parity ok || record parity FAIL

step cache_parity
PYTHONUNBUFFERED=1 timeout 300 python3 tests/gpu/cache_parity.py --strata "$BIN/strata" --models "$MODELS" \
    --out "$OUT/cache_parity.json" && record cache_parity ok || record cache_parity FAIL

step serve_greedy
PYTHONUNBUFFERED=1 timeout 200 python3 tests/gpu/serve_greedy_check.py --strata "$BIN/strata" --models "$MODELS" \
    > "$OUT/serve_greedy.txt" 2>&1 && record serve_greedy ok || record serve_greedy FAIL
tail -1 "$OUT/serve_greedy.txt"

step compute-sanitizer
if [ "${SKIP_SANITIZER:-0}" = 1 ]; then record sanitizer skipped; else
SAN="compute-sanitizer --tool memcheck --leak-check full --error-exitcode 3"
TINY=$(python3 -c "import json,sys; m=json.load(open('$MODELS/manifest.json'))['tiny']; print(m.get('iq2_xs') or next(iter(m.values())))")
TINY_F32=$(python3 -c "import json,sys; m=json.load(open('$MODELS/manifest.json'))['tiny']; print(m.get('f32') or next(iter(m.values())))")
san_ok=1
for model in "$TINY" "$TINY_F32"; do
  echo "memcheck: strata generate $model" | tee -a "$OUT/sanitizer.log"
  timeout 240 $SAN "$BIN/strata" generate --backend cuda --model "$MODELS/$model" -n 8 --ignore-eos \
      --prompt-ids 5,17,230,4,99,12,8,301,77,41,2,150,19,64,33,7,210,90,11,3 >> "$OUT/sanitizer.log" 2>&1 || san_ok=0
  tail -3 "$OUT/sanitizer.log"
done
# The hybrid path: 30% of tiny's experts cached (5 of 16 per layer on average), moves planned every pass.
SLOTS=$(python3 -c "import json; r=json.load(open('$OUT/cache_parity.json'))['results']; print(next((round(0.3*x['cuda']['cache']['experts']) for x in r if x.get('cuda',{}).get('cache')), 10))" 2>/dev/null || echo 10)
echo "memcheck: strata generate $TINY --expert-cache $SLOTS-slots --expert-adapt 1" | tee -a "$OUT/sanitizer.log"
# STRATA_PIN=copy: page-locking the mapped file in place is refused on file-backed pages (cudaHostRegister: invalid
# argument, a handled fallback that memcheck would report as an API error).
STRATA_PIN=copy timeout 240 $SAN "$BIN/strata" generate --backend cuda --model "$MODELS/$TINY" -n 8 --ignore-eos \
    --expert-cache "$SLOTS-slots" --expert-adapt 1 --cpu-workers 2 \
    --prompt-ids 5,17,230,4,99,12,8,301,77,41,2,150,19,64,33,7,210,90,11,3 >> "$OUT/sanitizer.log" 2>&1 || san_ok=0
tail -4 "$OUT/sanitizer.log"
echo "memcheck: cuda_ops_test" | tee -a "$OUT/sanitizer.log"
timeout 300 $SAN "$BIN/cuda_ops_test" >> "$OUT/sanitizer.log" 2>&1 || san_ok=0
tail -3 "$OUT/sanitizer.log"
[ $san_ok = 1 ] && record sanitizer ok || record sanitizer FAIL
fi

step cuda_matmul_speed
timeout 180 "$BIN/cuda_matmul_speed" "$OUT/speed.json" && record speed ok || record speed FAIL

step summary
{
  echo "{"
  first=1
  for k in build decode_host ops parity cache_parity serve_greedy sanitizer speed; do
    [ $first = 1 ] || echo ","
    first=0
    printf '  "%s": "%s"' "$k" "${STEP[$k]:-not run}"
  done
  echo; echo "}"
} > "$OUT/summary.json"
cat "$OUT/summary.json"
for k in build decode_host ops parity cache_parity serve_greedy sanitizer speed; do [ "${STEP[$k]:-}" = ok ] || exit 1; done
