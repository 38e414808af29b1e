#!/usr/bin/env bash
# The small decode ops at T = 1, 2, 8 on the lent H200 (issue #7, setting (a)), ~30-60 s:
#   1. cuda_ops_test --only hyper_read / route_topk / small_ops: these ops CUDA vs the CPU backend -> t1_checks_*.log
#   2. t1_ops: µs per call of hyper_read (Q2_0/Q2_0, IQ2_XS/IQ4_NL, BF16/BF16, with and without inj), route_topk
#      (512 experts, top-10), rms_norm (2560, 4 x 2560, 24 x 256, 4 x 128) and hyper_inject at the full model's shapes, the
#      current kernel next to the one it replaced (t1_variants.h), as one stream of calls and as a CUDA graph;
#      also their relative difference and whether the current kernel repeats bit for bit    -> t1_ops.json, t1_ops.log
# usage: bash bench/cuda_kernels/t1_ops.sh BUILD_DIR   (a cmake -DSTRATA_CUDA=ON build; OUT defaults to
#        bench/cuda_kernels/results/latest)
set -u
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
OUT=${OUT:-bench/cuda_kernels/results/latest}
BIN=$BUILD/engine
mkdir -p "$OUT"
rm -f "$OUT"/t1_ops.json "$OUT"/t1_ops.log "$OUT"/t1_checks_*
rc=0

for target in t1_ops cuda_ops_test; do
  if [ ! -x "$BIN/$target" ]; then
    echo "== build $target in $BUILD"
    cmake --build "$BUILD" -j "$(nproc)" --target $target > "$OUT/t1_build_$target.log" 2>&1 ||
      { tail -20 "$OUT/t1_build_$target.log"; echo "t1_ops.sh: build of $target FAILED"; rc=1; }
  fi
done

echo "== 1. cuda_ops_test (hyper_read, route_topk, small_ops)"
for g in hyper_read route_topk small_ops; do
  [ -x "$BIN/cuda_ops_test" ] || { echo "skipped: no $BIN/cuda_ops_test"; rc=1; break; }
  timeout 40 "$BIN/cuda_ops_test" "$OUT/t1_checks_$g.json" --only "$g" > "$OUT/t1_checks_$g.log" 2>&1 || rc=1
  echo "$g: $(grep -E 'checks,' "$OUT/t1_checks_$g.log" | tail -1)"
  grep -E "FAIL|error" "$OUT/t1_checks_$g.log" | head -10
done

# hyper_read's two-pass kernel-1 prologue (the one-pass one is the default at T = 1) against the CPU as well
STRATA_CUDA_HR_ONE_PASS=0 timeout 40 "$BIN/cuda_ops_test" "$OUT/t1_checks_hyper_read_two_pass.json" --only hyper_read \
  > "$OUT/t1_checks_hyper_read_two_pass.log" 2>&1 || rc=1
echo "hyper_read (two-pass prologue): $(grep -E 'checks,' "$OUT/t1_checks_hyper_read_two_pass.log" | tail -1)"
grep -E "FAIL|error" "$OUT/t1_checks_hyper_read_two_pass.log" | head -10

echo "== 2. t1_ops"
[ -x "$BIN/t1_ops" ] || { echo "t1_ops.sh: no $BIN/t1_ops"; exit 1; }
timeout 40 "$BIN/t1_ops" "$OUT/t1_ops.json" > "$OUT/t1_ops.log" 2>&1 || rc=1
grep -vE "^device" "$OUT/t1_ops.log"
head -1 "$OUT/t1_ops.log"

python3 - "$OUT/t1_ops.json" <<'PY' || rc=1
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
bad = [r for r in rows if not r["bitwise_repeat"]]
print(f"{len(rows)} timings; {len(bad)} not repeatable bit for bit")
for op in ("hyper_read", "route_topk", "rms_norm", "hyper_inject"):
    t1 = [r for r in rows if r["op"] == op and r["T"] == 1]
    if t1:
        b = max(r["before_graph_us"] for r in t1)
        n = max(r["now_graph_us"] for r in t1)
        print(f"  {op:13s} T=1 worst case: before {b:6.2f} us, now {n:6.2f} us (graph)")
sys.exit(1 if bad else 0)
PY
echo "t1_ops.sh rc $rc"
exit $rc
