#!/usr/bin/env bash
# The decode benchmark of issue #7 on a machine with an NVIDIA GPU (the lent H200): generates the synthetic
# full-size Q2_0 model if it is not there (engine/tools/make_synthetic.py, ~36 GB), then bench/decode.py for the
# all-on-GPU and the 12 GB PC settings. Results: $OUT/decode.json, the engines' logs, make_synthetic.log.
# usage: bench/decode/run_h200.sh [BUILD_DIR [decode.py flags]]   (BUILD_DIR with engine/strata built for CUDA; default build-gpu,
#        as tests/gpu/run.sh leaves it). Needs the gguf package (carry .whl/gguf-*.whl where it is missing).
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-bench/results/decode-latest}
BUILD=${1:-build-gpu}
[ $# -gt 0 ] && shift   # the rest goes to bench/decode.py
MODEL=${SYN_MODEL:-/tmp/syn-q2_0.gguf}
mkdir -p "$OUT"
python3 -c "import gguf" 2>/dev/null || {
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/gguf-*.whl && export PYTHONPATH=/tmp/site; }
if [ ! -x "$BUILD/engine/strata" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/build.log" 2>&1 &&
    cmake --build "$BUILD" -j "$(nproc)" --target strata >>"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/machine.txt"
lscpu | grep -E "Model name|^CPU\(s\)" | tee -a "$OUT/machine.txt"
if [ ! -f "$MODEL" ]; then
  timeout 150 python3 engine/tools/make_synthetic.py "$MODEL" --experts q2_0 --workers "$(nproc)" 2>&1 |
    tee "$OUT/make_synthetic.log" || exit 1
fi
python3 bench/decode.py --strata "$BUILD/engine/strata" --model "$MODEL" --out "$OUT" --budget-s "${BUDGET_S:-280}" "$@"
