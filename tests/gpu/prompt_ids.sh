#!/usr/bin/env bash
# Writes N spread-out token ids valid in MODEL's vocabulary, comma-separated, to FILE: the prompt of the synthetic
# model's prompt and memory runs (prefill_chunks.sh, card_memory.sh).
# usage: bash tests/gpu/prompt_ids.sh BUILD_DIR MODEL N FILE
set -u -o pipefail
VOCAB=$("$1/engine/strata" info "$2" 2>/dev/null | awk '$1 == "vocabulary" {print $2}')
python3 -c "v = int('${VOCAB:-512}') * 15 // 16; print(','.join(str((1000003 * i + 17) % (v - 10) + 10) for i in range($3)))" > "$4"
