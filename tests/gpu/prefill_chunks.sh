#!/usr/bin/env bash
# Prompt speed against the prompt chunk size (issue #7; the engine's default --chunk is 256, the decode tables ran
# 1,024, the public project's PC prefill uses chunks up to 8,192): `strata generate` on the synthetic model with a
# PROMPT-token prompt at each chunk size in CHUNKS, gpu (every expert on the GPU) and pc12 (4,100 slots, 6 CPU
# workers: every chunk streams the missed experts over PCIe, ~28 GB a chunk), with the GPU's peak memory use
# (nvidia-smi every 100 ms) and the engine's count of the prompt's activations and scratch (`memory:` of
# `strata generate`), so the activations' share of a 12 GB card can be read off. Writes $OUT/chunks/*.log and
# summary.txt; about PROMPT / 600 s + 10 s a run.
# usage: bash tests/gpu/prefill_chunks.sh BUILD_DIR [SYN_MODEL]
set -u -o pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
MODEL=${2:-/tmp/syn-q2_0.gguf}
OUT=${OUT:-tests/gpu/results/latest}/chunks
PROMPT=${PROMPT:-4096}
CHUNKS=${CHUNKS:-256 1024 2048 4096}
mkdir -p "$OUT"
[ -x "$BUILD/engine/strata" ] && [ -f "$MODEL" ] || { echo "prefill_chunks: no $BUILD/engine/strata or $MODEL"; exit 2; }
bash tests/gpu/prompt_ids.sh "$BUILD" "$MODEL" "$PROMPT" "$OUT/prompt.ids"
: > "$OUT/summary.txt"
for setting in gpu pc12; do
  args=()
  [ "$setting" = pc12 ] && args=(--expert-cache 4100-slots --cpu-workers 6)
  for chunk in $CHUNKS; do
    log=$OUT/${setting}_$chunk.log
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$OUT/mem_${setting}_$chunk.txt" 2>/dev/null &
    SMI=$!
    timeout 120 "$BUILD/engine/strata" generate --backend cuda --model "$MODEL" --prompt-file "$OUT/prompt.ids" -n 2 \
        --ignore-eos --ctx $((PROMPT + 64)) --chunk "$chunk" "${args[@]}" > /dev/null 2> "$log"
    echo "rc $?" >> "$log"
    kill $SMI 2>/dev/null; wait $SMI 2>/dev/null
    peak=$(sort -n "$OUT/mem_${setting}_$chunk.txt" | tail -1)
    # `memory:` is the engine's own count of the prompt's activations and op scratch (its device pool's live peak)
    echo "$setting chunk $chunk: $(grep -E '^prompt:' "$log" | cut -d';' -f1) peak GPU memory ${peak:-?} MiB;" \
        "$(grep -E '^memory:' "$log" | cut -d';' -f1) $(tail -1 "$log")" | tee -a "$OUT/summary.txt"
  done
done
