#!/usr/bin/env bash
# Long-context attention on the GPU (issue #7): attention_long_test (CUDA attention, indexer_scores, select_cells vs
# the CPU backend at 1 … 32K cells; µs per call before/after the split) and, given the synthetic model, strata
# generate's decode speed after a 32-token (the short-context reference), a 1K and a 4K prompt; at 4K also with the
# split off (STRATA_CUDA_SPLIT_ATTN=0) and grouped by kv head (STRATA_CUDA_GROUPED_ATTN=1), as time allows.
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
  # ctx:setting — auto = the defaults; split0 = one block per (query, head); grouped1 = the split grouped by kv head.
  # Most telling first: runs stop being started after 65 s (a 4K run takes ~20 s).
  for run in 4096:auto 1024:auto 64:auto 4096:split0 4096:grouped1; do
    ctx=${run%%:*}
    setting=${run#*:}
    if [ "$SECONDS" -gt 65 ]; then echo "skipped ctx=$ctx $setting (time)" | tee -a "$OUT/attention_decode.txt"; continue; fi
    PROMPT=$(python3 -c "print(','.join(str(100 + (37 * i) % 4000) for i in range($ctx - 32)))")
    split=1; grouped=0
    [ "$setting" = split0 ] && split=0
    [ "$setting" = grouped1 ] && grouped=1
    STRATA_CUDA_SPLIT_ATTN=$split STRATA_CUDA_GROUPED_ATTN=$grouped timeout 30 "$BUILD/engine/strata" generate \
        --backend cuda --model "$MODEL" --prompt-ids "$PROMPT" -n 32 --ignore-eos --ctx $((ctx + 64)) \
        > "$OUT/attn_decode_${ctx}_$setting.tokens" 2> "$OUT/attn_decode_${ctx}_$setting.log"
    echo "ctx=$ctx $setting rc $?: $(grep -E 'decode:' "$OUT/attn_decode_${ctx}_$setting.log" | tail -1)" \
        "tokens $(md5sum < "$OUT/attn_decode_${ctx}_$setting.tokens" | cut -c1-8)" | tee -a "$OUT/attention_decode.txt"
  done
fi
echo "attention_long: $([ $rc = 0 ] && echo ok || echo FAIL) (${SECONDS} s)"
exit $rc
