#!/usr/bin/env bash
# Where a drafted window's time goes on the GPU: `strata generate` on the synthetic model with STRATA_CUDA_PROFILE=1
# (GPU time per op, tables at exit), plain and with the synthetic MTP head drafting 3 tokens a window whatever their
# probability (its drafts are almost never accepted, so every window is a verify pass of 4 tokens, a rollback and a
# replay of one token; mtp1: windows of 2), every expert on the GPU. Writes $OUT/specprof/{plain,mtp,mtp1}.log and diff.txt (tests/gpu/profile_diff.py: GPU ms a step, op by op).
# usage: bash tests/gpu/spec_profile.sh BUILD_DIR [SYN_MODEL]
set -u -o pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
MODEL=${2:-/tmp/syn-q2_0.gguf}
MTP=${MODEL%.gguf}-mtp.gguf
OUT=${OUT:-tests/gpu/results/latest}/specprof
mkdir -p "$OUT"
IDS=$(python3 -c "print(','.join(str((1000003 * i + 17) % 200000 + 1000) for i in range(256)))")
for run in plain mtp mtp1; do
  extra=()
  [ "$run" = mtp ] && extra=(--mtp "$MTP" --spec 3 --draft-min-p 0)
  [ "$run" = mtp1 ] && extra=(--mtp "$MTP" --spec 1 --draft-min-p 0)   # windows of 2 tokens
  STRATA_CUDA_PROFILE=1 timeout 120 "$BUILD/engine/strata" generate --backend cuda --model "$MODEL" --prompt-ids "$IDS" \
      -n 48 --ignore-eos --ctx 1024 "${extra[@]}" > /dev/null 2> "$OUT/$run.log"
  echo "$run: rc $? $(grep -E '^decode|decode:' "$OUT/$run.log" | head -1)"
done
python3 tests/gpu/profile_diff.py "$OUT/plain.log" "$OUT/mtp.log" 48 | tee "$OUT/diff.txt"
