#!/usr/bin/env bash
# Checks of the device routing, the sync-free uploads and CUDA graphs on a GPU machine (a few minutes on an H200):
#   1. cuda_ops_test: route_topk and select_cells vs the CPU (exact ties too), quantized-input reuse, graph replay
#      with new host values                                                                  -> ops_graphs.log
#   2. the trained demo model (its QSA budget keeps decode on graphs): greedy tokens of CUDA with graphs equal the
#      CPU's (f32 activations, as parity.py gates) and CUDA's without graphs (default mode); the same with MTP
#      speculation (verify passes of 2..4 tokens run as graphs)
#   3. tests/gpu/ab_speed.sh STRATA_CUDA_GRAPHS: decode tok/s with graphs off/on (the synthetic model when present, else the demo)
# Results in $OUT; exits non-zero when a check fails. SKIP_OPS=1 skips step 1 (run.sh has just run cuda_ops_test).
# usage: tests/gpu/graphs_check.sh BUILD_DIR
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-tests/gpu/results/latest}
BUILD=${1:-build-gpu}
BIN=$BUILD/engine
mkdir -p "$OUT"
fail=0
if [ "${SKIP_OPS:-0}" != 1 ]; then
  echo "== cuda_ops_test"
  timeout 180 "$BIN/cuda_ops_test" "$OUT/ops_graphs.json" > "$OUT/ops_graphs.log" 2>&1 || fail=1
  grep -E "route_topk|select_cells|reuse|graph|FAIL|error|checks" "$OUT/ops_graphs.log" | head -80
fi

DEMO=installer/demo/strata-demo.gguf
MTP=installer/demo/strata-demo-mtp.gguf
PROMPT=$(python3 -c "print(','.join(str((i * 37 + 11) % 470 + 1) for i in range(40)))")
tokens() {  # name, backend, graphs, extra args
  local name=$1 backend=$2 graphs=$3; shift 3
  STRATA_CUDA_GRAPHS=$graphs timeout 120 "$BIN/strata" generate --backend "$backend" --model "$DEMO" \
      --prompt-ids "$PROMPT" -n 64 --ignore-eos "$@" > "$OUT/demo_$name.tokens" 2> "$OUT/demo_$name.log"
  echo "$name rc $? $(grep -E 'decode:|graphs:' "$OUT/demo_$name.log" | tr '\n' ' ')"
  tail -1 "$OUT/demo_$name.tokens"
}
same() {
  if [ -s "$OUT/demo_$1.tokens" ] && cmp -s <(tail -1 "$OUT/demo_$1.tokens") <(tail -1 "$OUT/demo_$2.tokens"); then
    echo "-- $1 == $2: ok"
  else
    echo "-- $1 == $2: FAIL"; fail=1
  fi
}
for spec in "" "--mtp $MTP --spec 3"; do
  tag=${spec:+_mtp}
  echo "== demo model ${spec:-plain}"
  tokens "cpu_f32$tag" cpu 0 --f32-activations $spec
  tokens "cuda_graphs_f32$tag" cuda 1 --f32-activations $spec
  tokens "cuda_nographs$tag" cuda 0 $spec
  tokens "cuda_graphs$tag" cuda 1 $spec
  same "cpu_f32$tag" "cuda_graphs_f32$tag"     # as parity.py's gate: f32 activations on both
  same "cuda_nographs$tag" "cuda_graphs$tag"   # the same kernels with and without graphs: identical tokens
done

echo "== graph speed (ab_speed.sh STRATA_CUDA_GRAPHS)"
SYN=${SYN_MODEL:-/tmp/syn-q2_0.gguf}
if [ -f "$SYN" ]; then SAME=1 tests/gpu/ab_speed.sh STRATA_CUDA_GRAPHS "$BUILD" "$SYN" "$DEMO" || fail=1
else SAME=1 tests/gpu/ab_speed.sh STRATA_CUDA_GRAPHS "$BUILD" "$DEMO" || fail=1; fi
echo "graphs_check: $([ $fail = 0 ] && echo ok || echo FAIL)"
exit $fail
