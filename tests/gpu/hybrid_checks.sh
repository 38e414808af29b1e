#!/usr/bin/env bash
# Checks of the hybrid expert path on a machine with a GPU (demo model, frozen cache of 40 slots):
#   hybrid_join_test   the mapped-memory join itself: activations out, results back, the stream held until then
#   join A/B           (the host-driven joins: STRATA_HYBRID_DEVICE=0; device_join_parity.py checks the device join)
#                      prompt chunk of 40 tokens (tiled kernels: hits from the slots, misses staged over PCIe in
#                      batches), then 32 decode tokens (CPU misses, shared expert queued before the join): the async
#                      join and STRATA_HYBRID_JOIN=host must give byte-identical logits (same arithmetic)
#   vs CPU             the same run with --f32-activations against --backend cpu: identical tokens, every step's
#                      logits within 1e-3 of the CPU's (max |cuda - cpu| / max |cpu|); also with
#                      STRATA_GPU_MISS_SHARE=0.5 (half of each decode pass's misses staged over PCIe onto the GPU)
# Results: $OUT/hybrid_checks.json and logs. usage: bash tests/gpu/hybrid_checks.sh [BUILD_DIR]
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-tests/gpu/results/latest}
BUILD=${1:-${BUILD:-build-gpu}}
mkdir -p "$OUT"
cmake --build "$BUILD" -j "$(nproc)" --target hybrid_join_test strata > "$OUT/hybrid_build.log" 2>&1 ||
  { tail -20 "$OUT/hybrid_build.log"; exit 1; }
timeout 120 "$BUILD/engine/hybrid_join_test" > "$OUT/hybrid_join_test.log" 2>&1
join_rc=$?
tail -2 "$OUT/hybrid_join_test.log"
MODEL=installer/demo/strata-demo.gguf
PROMPT=$(python3 -c "print(','.join(str(5 + 37 * i % 2000) for i in range(40)))")
CACHE=(--expert-cache 40-slots --expert-adapt 0 --cpu-workers 4)
ab_rc=0
for mode in async host; do
  STRATA_HYBRID_DEVICE=0 STRATA_HYBRID_JOIN=$mode timeout 120 "$BUILD/engine/strata" generate --backend cuda --model "$MODEL" \
      --prompt-ids "$PROMPT" -n 32 --ignore-eos "${CACHE[@]}" \
      --logits-out "$OUT/hybrid_$mode.f32" > "$OUT/hybrid_$mode.tokens" 2> "$OUT/hybrid_$mode.log" || ab_rc=1
  grep -E "expert cache:|decode split" "$OUT/hybrid_$mode.log" | tail -2
done
cmp -s "$OUT/hybrid_async.f32" "$OUT/hybrid_host.f32" && same=true || { same=false; ab_rc=1; }
grep -q "join async" "$OUT/hybrid_async.log" && grep -q "join host" "$OUT/hybrid_host.log" || ab_rc=1
grep -q "MiB of missed experts over PCIe" "$OUT/hybrid_async.log" || ab_rc=1
cpu_rc=0
timeout 180 "$BUILD/engine/strata" generate --backend cpu --model "$MODEL" --prompt-ids "$PROMPT" -n 32 \
    --ignore-eos --f32-activations --logits-out "$OUT/hybrid_cpu_f32.f32" > "$OUT/hybrid_cpu_f32.tokens" \
    2> "$OUT/hybrid_cpu_f32.log" || cpu_rc=1
for share in 0 0.5; do   # 0.5: half of each decode pass's missed experts staged over PCIe onto the GPU
  STRATA_GPU_MISS_SHARE=$share timeout 120 "$BUILD/engine/strata" generate --backend cuda --model "$MODEL" \
      --prompt-ids "$PROMPT" -n 32 --ignore-eos --f32-activations "${CACHE[@]}" \
      --logits-out "$OUT/hybrid_cuda_f32_share$share.f32" > "$OUT/hybrid_cuda_f32_share$share.tokens" \
      2> "$OUT/hybrid_cuda_f32_share$share.log" || cpu_rc=1
done
vs_cpu=$(python3 - "$OUT" <<'PY'
import sys, numpy as np
out = sys.argv[1]
def check(name):
    c = np.fromfile(f"{out}/hybrid_cpu_f32.f32", dtype=np.float32)
    g = np.fromfile(f"{out}/{name}.f32", dtype=np.float32)
    same_tokens = open(f"{out}/hybrid_cpu_f32.tokens").read() == open(f"{out}/{name}.tokens").read()
    c, g = c.reshape(32, -1), g.reshape(32, -1)
    rel = float(max(np.abs(g[i] - c[i]).max() / max(np.abs(c[i]).max(), 1e-30) for i in range(32)))
    return same_tokens, rel
try:
    parts, ok = [], True
    for share in ("0", "0.5"):
        same, rel = check(f"hybrid_cuda_f32_share{share}")
        ok = ok and same and rel <= 1e-3
        parts.append(f'"share_{share}": {{"tokens_identical": {str(same).lower()}, "max_rel_logit_diff": {rel:.3g}}}')
    print("{" + ", ".join(parts) + f', "ok": {str(ok).lower()}}}')
except Exception as e:
    print(f'{{"ok": false, "error": "{type(e).__name__}: {e}"}}')
PY
)
echo "$vs_cpu" | grep -q '"ok": true' || cpu_rc=1
printf '{"hybrid_join_test": "%s", "join_ab_logits_identical": %s, "join_ab": "%s", "vs_cpu_f32": %s}\n' \
  "$([ $join_rc = 0 ] && echo ok || echo FAIL)" "$same" "$([ $ab_rc = 0 ] && echo ok || echo FAIL)" "$vs_cpu" |
  tee "$OUT/hybrid_checks.json"
[ $join_rc = 0 ] && [ $ab_rc = 0 ] && [ $cpu_rc = 0 ]
