#!/usr/bin/env bash
# One device round for issue #7 on the lent H200, in two parts that each fit one device call (<= 10 min):
#   checks  tests/gpu/run.sh (build, ops, tiny-model parity, expert-cache parity, memcheck, matmul speed), tiled
#           prompt kernels vs CPU on tiny models (prefill_check.sh), graphs vs CPU on the demo model
#           (graphs_check.sh), the hybrid join checks;
#           KERNELS=1 adds the kernel before/after benchmark (bench/cuda_kernels/run.sh, ~2.5 min)
#   speed   the synthetic full-size model: prompt speed tiled off/on (prefill_check.sh), GRAPHS=1 adds graphs
#           off/on, then bench/decode.py
# Runs on the copied working tree as it is (the device's .git is not this checkout's: never reset files from it).
#   quick   run.sh, then on the synthetic model decode A/B of the fused kernels and bench/decode.py (one call)
# usage: tests/gpu/issue7_round.sh checks|speed|quick [DECODE_BUDGET_S]
#        results in /tmp/round/..., packed into $OUT/round-PART.tgz (the device tool returns at most 8 files).
set -u
cd "$(dirname "$0")/../.."
PART=${1:-checks}
BUDGET=${2:-120}
ROOT=/tmp/round/$PART
PACK=${OUT:-.}
rm -rf "$ROOT"; mkdir -p "$ROOT"
trap 'tar -czf "$PACK/round-$PART.tgz" -C "$ROOT" .' EXIT
python3 -c "import gguf" 2>/dev/null || {
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/gguf-*.whl && export PYTHONPATH=/tmp/site; }
export PYTHONPATH=${PYTHONPATH:-}
if [ "$PART" = quick ]; then      # one call when device time is short: run.sh, then the synthetic model's A/B and bench
  (OUT=$ROOT/gpu timeout 200 bash tests/gpu/run.sh .gpu-models > "$ROOT/gpu_run.log" 2>&1; echo "run.sh rc $?" >> "$ROOT/gpu_run.log")
  grep -E "^-- |rc " "$ROOT/gpu_run.log"; grep -E "FAIL" "$ROOT/gpu/ops.log" | head -20
  [ -x build-gpu/engine/strata ] || exit 1
  MODEL=/tmp/syn-q2_0.gguf
  ( time timeout 100 python3 engine/tools/make_synthetic.py "$MODEL" --experts q2_0 --workers "$(nproc)" ) > "$ROOT/make_synthetic.log" 2>&1
  tail -2 "$ROOT/make_synthetic.log"
  P=$(python3 -c "print(','.join(str(100 + 37 * i) for i in range(32)))")
  for ab in "default" "STRATA_CUDA_FUSED_QUANT=1" "STRATA_CUDA_FUSED_MOE=0" "STRATA_CUDA_FUSED_HYPER=0"; do
    env $( [ "$ab" = default ] || echo "$ab" ) timeout 60 build-gpu/engine/strata generate --backend cuda --model "$MODEL" \
        --prompt-ids "$P" -n 64 --ignore-eos --ctx 256 > "$ROOT/ab_$ab.tokens" 2> "$ROOT/ab_$ab.log"
    echo "$ab: $(grep -o 'decode: .*tok/s)' "$ROOT/ab_$ab.log") tokens $(md5sum < "$ROOT/ab_$ab.tokens" | cut -c1-8)"
  done
  OUT=$ROOT/decode SYN_MODEL=$MODEL BUDGET_S=$BUDGET timeout $((BUDGET + 45)) bash bench/decode/run_h200.sh build-gpu 2>&1 | tail -25
elif [ "$PART" = checks ]; then
  (OUT=$ROOT/gpu timeout 300 bash tests/gpu/run.sh .gpu-models > "$ROOT/gpu_run.log" 2>&1; echo "run.sh rc $?" >> "$ROOT/gpu_run.log")
  grep -E "^-- |rc " "$ROOT/gpu_run.log"
  [ -x build-gpu/engine/strata ] || exit 1
  if [ "${KERNELS:-0}" = 1 ]; then
    OUT=$ROOT/kernels timeout 200 bash bench/cuda_kernels/run.sh > "$ROOT/kernels.log" 2>&1; echo "kernels rc $?"
    tail -25 "$ROOT/kernels/compare_t1rows.txt" 2>/dev/null
  fi
  OUT=$ROOT/prefill SKIP_OPS=1 OPS_LOG=$ROOT/gpu/ops.log timeout 150 bash tests/gpu/prefill_check.sh build-gpu 2>&1 | tail -20
  OUT=$ROOT/graphs_check SKIP_OPS=1 timeout 150 bash tests/gpu/graphs_check.sh build-gpu 2>&1 | tail -25
  OUT=$ROOT/hybrid timeout 120 bash tests/gpu/hybrid_checks.sh 2>&1 | tail -15
else
  [ -x build-gpu/engine/strata ] || { cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null && cmake --build build-gpu -j "$(nproc)" --target strata > "$ROOT/build.log" 2>&1; } || exit 1
  MODEL=/tmp/syn-q2_0.gguf
  [ -f "$MODEL" ] || ( time timeout 200 python3 engine/tools/make_synthetic.py "$MODEL" --experts q2_0 --workers "$(nproc)" ) > "$ROOT/make_synthetic.log" 2>&1
  OUT=$ROOT/prefill_syn SKIP_OPS=1 timeout 240 bash tests/gpu/prefill_check.sh build-gpu "$MODEL" 2>&1 | tail -20
  [ "${GRAPHS:-0}" = 1 ] && OUT=$ROOT/graphs_syn SAME=1 timeout 150 bash tests/gpu/ab_speed.sh STRATA_CUDA_GRAPHS build-gpu "$MODEL" 2>&1 | tail -20
  OUT=$ROOT/decode SYN_MODEL=$MODEL BUDGET_S=$BUDGET timeout $((BUDGET + 60)) bash bench/decode/run_h200.sh build-gpu 2>&1 | tail -40
fi
