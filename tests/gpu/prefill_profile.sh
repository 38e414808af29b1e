#!/usr/bin/env bash
# Where a prompt's time goes on the GPU path (issue #7; prefill is ~640 tok/s on the H200 in the decode tables, the
# public project's 5070 does 2,171-2,653 at 32K): `strata generate` on the synthetic model with a prompt of PROMPT
# tokens (chunks of CHUNK) and STRATA_CUDA_PROFILE=1, whose second table splits the prompt chunks' GPU time by op.
# Settings: gpu (every expert on the GPU; records a routing profile) and pc12 (4,100 slots, 6 CPU workers, filled from
# that profile), each with the f32 tiled prompt matmuls and with the tensor-core ones (_mmq: STRATA_CUDA_MMQ=1).
# Writes $OUT/prefill_<setting>.log (the tables, the speeds) and a summary; <= ~4 x 60 s.
# usage: bash tests/gpu/prefill_profile.sh BUILD_DIR [SYN_MODEL] [BACKEND]   (BACKEND cpu: the plumbing on a tiny model)
set -u -o pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
MODEL=${2:-/tmp/syn-q2_0.gguf}
BACKEND=${3:-cuda}
OUT=${OUT:-tests/gpu/results/latest}/prefill
PROMPT=${PROMPT:-2048}
CHUNK=${CHUNK:-1024}
mkdir -p "$OUT"
[ -x "$BUILD/engine/strata" ] && [ -f "$MODEL" ] || { echo "prefill_profile: no $BUILD/engine/strata or $MODEL"; exit 2; }
# Token ids spread over the vocabulary (the synthetic router depends on the token), deterministic, below the stop ids.
VOCAB=$("$BUILD/engine/strata" info "$MODEL" 2>/dev/null | awk '$1 == "vocabulary" {print $2}')
python3 -c "v = int('${VOCAB:-512}') * 15 // 16; print(','.join(str((1000003 * i + 17) % (v - 10) + 10) for i in range($PROMPT)))" \
    > "$OUT/prompt.ids"
run() {   # name, STRATA_CUDA_MMQ value, extra strata arguments...
  local name=$1 mmq=$2; shift 2
  local env=(STRATA_CUDA_PROFILE=1 STRATA_CUDA_MMQ=$mmq)
  [ "$BACKEND" = cpu ] && env=(STRATA_PROFILE=1)
  env "${env[@]}" timeout 60 "$BUILD/engine/strata" generate --backend "$BACKEND" --model "$MODEL" \
      --prompt-file "$OUT/prompt.ids" -n 4 --ignore-eos --ctx $((PROMPT + 64)) --chunk "$CHUNK" "$@" \
      > "$OUT/prefill_$name.tokens" 2> "$OUT/prefill_$name.log"
  echo "rc $?" >> "$OUT/prefill_$name.log"
  echo "== $name: $(grep -E '^prompt:' "$OUT/prefill_$name.log" | head -1)"
  # the prompt table's largest rows (the CPU profile has one table; the CUDA one prints the prompt's second)
  awk '/outside decode passes|cpu op profile|op profile \(STRATA_PROFILE/ {on = 1; n = 0} on && n++ < 24' \
      "$OUT/prefill_$name.log"
}
if [ "$BACKEND" = cuda ]; then
  run gpu 0 --routing-profile-out "$OUT/routing.profile"
  run gpu_mmq 1
  run pc12 0 --expert-cache 4100-slots --cpu-workers 6 --routing-profile "$OUT/routing.profile"
  run pc12_mmq 1 --expert-cache 4100-slots --cpu-workers 6 --routing-profile "$OUT/routing.profile"
else
  run cpu 0
fi
for f in "$OUT"/prefill_*.log; do echo "$(basename "$f" .log): $(grep -h -E '^prompt:' "$f") $(tail -1 "$f")"; done \
    > "$OUT/summary.txt"
