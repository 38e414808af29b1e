#!/usr/bin/env bash
# Does `--expert-cache auto` leave room for what comes after it on a consumer card? On the H200, STRATA_CUDA_VRAM_MIB
# makes the engine size its cache as on a card of CARD_MIB (default 12,288: a 12 GB card); then a PROMPT-token
# prompt (the engine's default chunk) and a few decode tokens run at --ctx CTX, with nvidia-smi sampling the GPU's
# memory every 50 ms. The peak (CUDA context included, as on the real card) must stay under CARD_MIB.
# Writes $OUT/card/*.log and summary.txt; exit 1 when a peak exceeds the card.
# usage: bash tests/gpu/card_memory.sh BUILD_DIR [SYN_MODEL]
set -u -o pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
MODEL=${2:-/tmp/syn-q2_0.gguf}
OUT=${OUT:-tests/gpu/results/latest}/card
CARD_MIB=${CARD_MIB:-12288}
PROMPT=${PROMPT:-8192}
CTXS=${CTXS:-16384 32768}
mkdir -p "$OUT"
[ -x "$BUILD/engine/strata" ] && [ -f "$MODEL" ] || { echo "card_memory: no $BUILD/engine/strata or $MODEL"; exit 2; }
bash tests/gpu/prompt_ids.sh "$BUILD" "$MODEL" "$PROMPT" "$OUT/prompt.ids"
: > "$OUT/summary.txt"
fail=0
for ctx in $CTXS; do
  for kv in f32 q8; do
    log=$OUT/ctx${ctx}_$kv.log
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 50 > "$OUT/mem_${ctx}_$kv.txt" 2>/dev/null &
    SMI=$!
    STRATA_CUDA_VRAM_MIB=$CARD_MIB timeout 150 "$BUILD/engine/strata" generate --backend cuda --model "$MODEL" \
        --prompt-file "$OUT/prompt.ids" -n 16 --ignore-eos --ctx "$ctx" --kv "$kv" --expert-cache auto \
        --cpu-workers 6 > /dev/null 2> "$log"
    rc=$?
    kill $SMI 2>/dev/null; wait $SMI 2>/dev/null
    peak=$(sort -n "$OUT/mem_${ctx}_$kv.txt" | tail -1)
    verdict=ok
    if [ "$rc" != 0 ] || [ -z "$peak" ] || [ "$peak" -gt "$CARD_MIB" ]; then verdict=OVER; fail=1; fi
    echo "card $CARD_MIB MiB, ctx $ctx, kv $kv: rc $rc, peak ${peak:-?} MiB ($verdict); $(grep -oE 'expert cache: [0-9]+ of [0-9]+' "$log" | head -1);" \
        "$(grep -E '^prompt:' "$log" | cut -d';' -f1); $(grep -E '^memory:' "$log" | cut -d';' -f1)" | tee -a "$OUT/summary.txt"
  done
done
exit $fail
