#!/usr/bin/env bash
# Per-op GPU times of the 12 GB PC stand-in (4,100 slots, 6 CPU workers) with the device-driven join: `strata
# generate` on the synthetic model, 64 tokens after 32, STRATA_CUDA_PROFILE=1 (graphs off, so the pass is slower than
# in the benchmark; the table says where the GPU's time goes), at zero-copy shares 0 (every miss on the CPU), 1 (every
# miss read by the GPU over PCIe) and auto. Logs under $OUT. usage: hybrid_profile.sh BUILD MODEL [ROUTING_PROFILE]
set -u
BUILD=$1 MODEL=$2 PROFILE=${3:-}
OUT=${OUT:-/tmp/hybrid_profile}
mkdir -p "$OUT"
IDS=$(python3 -c "print(','.join(str(1000 + 37 * i) for i in range(32)))")
for share in 0 1 auto; do
  env STRATA_CUDA_PROFILE=1 STRATA_GPU_MISS_SHARE=$share timeout 90 "$BUILD/engine/strata" generate --backend cuda \
    --model "$MODEL" --prompt-ids "$IDS" -n 64 --ignore-eos --expert-cache 4100-slots --cpu-workers 6 \
    ${PROFILE:+--routing-profile "$PROFILE"} > "$OUT/hybrid_profile_share_$share.log" 2>&1
  echo "share $share: rc $? $(grep -o 'decode: [0-9]* tokens in [0-9.]* s ([0-9.]* tok/s)' "$OUT/hybrid_profile_share_$share.log")"
done
