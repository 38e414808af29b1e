#!/usr/bin/env bash
# The hybrid path's CPU expert pool on the H200 host (issue #7): bench/cpu_pool/run.sh (the pool alone on the decode
# shape, 1-6 workers, prefetch A/B), then one hybrid decode of the synthetic model (4,100 slots, 6 CPU workers, slots
# filled by expert id) for the engine's own "decode split" CPU GB/s, if the bench took under 30 s. Results under
# $OUT/cpu_pool; <= ~90 s.
# usage: bash tests/gpu/cpu_pool.sh BUILD_DIR [SYN_MODEL]
set -u -o pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
MODEL=${2:-/tmp/syn-q2_0.gguf}
OUT=${OUT:-tests/gpu/results/latest}/cpu_pool
mkdir -p "$OUT"
echo "== the pool alone (bench/cpu_pool/run.sh)"
OUT="$OUT" timeout 70 bash bench/cpu_pool/run.sh "$BUILD" > "$OUT/run_sh.log" 2>&1
echo "rc $?" >> "$OUT/run_sh.log"
cat "$OUT/summary.txt" 2>/dev/null || tail -5 "$OUT/run_sh.log"
if [ "$SECONDS" -gt 30 ]; then
  echo "hybrid decode skipped: the bench took ${SECONDS} s (the script keeps to ~90 s)"
elif [ -f "$MODEL" ] && [ -x "$BUILD/engine/strata" ]; then
  echo "== hybrid decode, 4100 slots, 6 CPU workers"
  PROMPT=$(python3 -c "print(','.join(str(100 + 37 * i) for i in range(8)))")
  timeout 60 "$BUILD/engine/strata" generate --backend cuda --model "$MODEL" --prompt-ids "$PROMPT" -n 64 --ignore-eos \
      --ctx 128 --cpu-workers 6 --expert-cache 4100-slots --expert-adapt 0 > "$OUT/hybrid.tokens" 2> "$OUT/hybrid.log"
  echo "rc $?" >> "$OUT/hybrid.log"
  grep -E "decode split|decode:|rc " "$OUT/hybrid.log"
else
  echo "no $MODEL or $BUILD/engine/strata: hybrid decode skipped"
fi
