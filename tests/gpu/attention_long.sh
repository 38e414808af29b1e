#!/usr/bin/env bash
# Long-context attention on the GPU (issue #7): attention_long_test (CUDA attention, indexer_scores, select_cells vs
# the CPU backend at 1 … 32K cells; µs per call before/after the split) and, given the synthetic model, strata
# generate's decode speed after a 1K and a 4K prompt with the split attention off and on (STRATA_CUDA_SPLIT_ATTN=0/1)
# and after a 32-token prompt (the short-context reference).
# Writes $OUT/attention_long.json, $OUT/attention_long.log, $OUT/attention_decode.txt. ~60-90 s on an H200.
# usage: tests/gpu/attention_long.sh BUILD_DIR [SYN_MODEL]   (BUILD_DIR: a CUDA build, e.g. build-gpu)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-tests/gpu/results/latest}
BUILD=${1:-build-gpu}
MODEL=${2:-}
mkdir -p "$OUT"
rc=0
if ! cmake --build "$BUILD" -j "$(nproc)" --target attention_long_test strata > "$OUT/attention_long_build.log" 2>&1; then
  tail -30 "$OUT/attention_long_build.log"
  echo "attention_long: build FAILED"
  exit 1
fi
echo "== attention_long_test"
timeout 60 "$BUILD/engine/attention_long_test" "$OUT/attention_long.json" > "$OUT/attention_long.log" 2>&1 || rc=1
echo "rc $rc" >> "$OUT/attention_long.log"
grep -E "FAIL|error|device|checks|precision|us$" "$OUT/attention_long.log"

if [ -n "$MODEL" ] && [ -f "$MODEL" ]; then
  : > "$OUT/attention_decode.txt"
  for ctx in 64 1024 4096; do     # 64: the short-context reference (split on only)
    PROMPT=$(python3 -c "print(','.join(str(100 + (37 * i) % 4000) for i in range($ctx - 32)))")
    for split in 0 1; do
      [ "$ctx" = 64 ] && [ "$split" = 0 ] && continue
      if [ "$SECONDS" -gt 65 ]; then echo "skipped ctx=$ctx split=$split (time)" | tee -a "$OUT/attention_decode.txt"; continue; fi
      STRATA_CUDA_SPLIT_ATTN=$split timeout 30 "$BUILD/engine/strata" generate --backend cuda --model "$MODEL" \
          --prompt-ids "$PROMPT" -n 32 --ignore-eos --ctx $((ctx + 64)) > "$OUT/attn_decode_${ctx}_$split.tokens" \
          2> "$OUT/attn_decode_${ctx}_$split.log"
      echo "ctx=$ctx STRATA_CUDA_SPLIT_ATTN=$split rc $?: $(grep -E 'decode:' "$OUT/attn_decode_${ctx}_$split.log" | tail -1)" \
          "tokens $(md5sum < "$OUT/attn_decode_${ctx}_$split.tokens" | cut -c1-8)" | tee -a "$OUT/attention_decode.txt"
    done
  done
fi
echo "attention_long: $([ $rc = 0 ] && echo ok || echo FAIL) (${SECONDS} s)"
exit $rc
