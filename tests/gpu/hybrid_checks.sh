#!/usr/bin/env bash
# Checks of the hybrid expert path's join and prompt-chunk staging, on a machine with a GPU (after tests/gpu/run.sh
# built $BUILD):
#   hybrid_join_test   the mapped-memory join itself: activations out, results back, the stream held until then
#   join A/B           the demo model with a frozen 30% cache (prompt chunk of 40 tokens: misses staged over PCIe in
#                      4-expert batches; 32 decode tokens: CPU misses): the async join and STRATA_HYBRID_JOIN=host
#                      must give byte-identical logits (same arithmetic, only the synchronisation differs)
# Results: $OUT/hybrid_checks.json and logs. usage: tests/gpu/hybrid_checks.sh
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-tests/gpu/results/latest}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT"
cmake --build "$BUILD" -j "$(nproc)" --target hybrid_join_test strata > "$OUT/hybrid_build.log" 2>&1 ||
  { tail -20 "$OUT/hybrid_build.log"; exit 1; }
timeout 120 "$BUILD/engine/hybrid_join_test" > "$OUT/hybrid_join_test.log" 2>&1
join_rc=$?
tail -2 "$OUT/hybrid_join_test.log"
MODEL=installer/demo/strata-demo.gguf
PROMPT=$(python3 -c "print(','.join(str(5 + 37 * i % 2000) for i in range(40)))")
ab_rc=0
for mode in async host; do
  env_join=$([ $mode = host ] && echo host || echo async)
  STRATA_HYBRID_JOIN=$env_join timeout 120 "$BUILD/engine/strata" generate --backend cuda --model "$MODEL" \
      --prompt-ids "$PROMPT" -n 32 --ignore-eos --expert-cache 40-slots --expert-adapt 0 --cpu-workers 4 \
      --logits-out "$OUT/hybrid_$mode.f32" > "$OUT/hybrid_$mode.tokens" 2> "$OUT/hybrid_$mode.log" || ab_rc=1
  grep -E "expert cache:|decode split" "$OUT/hybrid_$mode.log" | tail -2
done
cmp -s "$OUT/hybrid_async.f32" "$OUT/hybrid_host.f32" && same=true || { same=false; ab_rc=1; }
grep -q "join async" "$OUT/hybrid_async.log" && grep -q "join host" "$OUT/hybrid_host.log" || ab_rc=1
printf '{"hybrid_join_test": "%s", "join_ab_logits_identical": %s, "join_ab": "%s"}\n' \
  "$([ $join_rc = 0 ] && echo ok || echo FAIL)" "$same" "$([ $ab_rc = 0 ] && echo ok || echo FAIL)" | tee "$OUT/hybrid_checks.json"
[ $join_rc = 0 ] && [ $ab_rc = 0 ]
