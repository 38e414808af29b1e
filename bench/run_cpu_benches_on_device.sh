#!/usr/bin/env bash
# The CPU benchmarks of issues #2 and #3 on the lent H200 host, in one device call:
#   bash bench/run_cpu_benches_on_device.sh        (device tool: carry [".whl"] holding gguf-0.19.0-py3-none-any.whl)
# 1. quant_dot_bench: GB/s of the expert dot-product kernels at 1, 2, 6 and 15 threads, with the DRAM read bandwidth;
# 2. the synthetic full-size model (and, as a reference, the all-on-GPU decode of the CUDA backend) (48 layers, 512 experts of 640 x 2560) in Q2_0 and IQ2_XS: CPU decode tokens/s and
#    routed-expert GB/s at 6 threads (a desktop's worker count) and 15, and at 6 threads with AVX2 only.
# Results go to $OUT (results.json per benchmark). Each step has its own time limit so the rest still reports.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/strata-bench-out}
mkdir -p "$OUT"
export JOBS=16 STRATA_BENCH_BUILD=build-bench PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/gguf-0.19.0-py3-none-any.whl && export PYTHONPATH=/tmp/site
{ lscpu; free -g; df -h /tmp; } > "$OUT/machine.txt" 2>&1

echo "== build (CPU; CUDA for the all-on-GPU reference number)"
cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build-bench -j16 --target strata quant_dot_bench | tail -1
[ "${STRATA_BENCH_CUDA:-1}" = 1 ] && (cmake -S . -B build-bench-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null \
  && cmake --build build-bench-cuda -j16 --target strata | tail -1) > /tmp/cuda_build.log 2>&1
tail -3 /tmp/cuda_build.log

if [ "${STRATA_BENCH_QUANT:-1}" = 1 ]; then
  echo "== quant_dot_bench"
  timeout 120 bash bench/quant_dot/run.sh 1,2,6,15 2048 >/dev/null
  mkdir -p "$OUT/quant_dot" && cp bench/quant_dot/results/*-"$(hostname -s)"/results.json "$OUT/quant_dot/"
fi

for experts in q2_0 iq2_xs; do
  echo "== synthetic $experts"
  model=/tmp/syn-$experts.gguf
  timeout 200 python3 engine/tools/make_synthetic.py "$model" --experts "$experts" --workers 16 || continue
  timeout 150 python3 bench/cpu_decode/run.py --model "$model" --strata build-bench/engine/strata --threads 6,15 \
    --out "$OUT/cpu_decode_$experts"
  if [ -x build-bench-cuda/engine/strata ]; then
    timeout 90 python3 bench/cpu_decode/run.py --model "$model" --strata build-bench-cuda/engine/strata --threads 6 \
      --backend cuda --decode 64 --out "$OUT/gpu_decode_$experts"
  fi
  if [ "$experts" = q2_0 ] && [ "${STRATA_BENCH_AVX2:-1}" = 1 ]; then
    timeout 80 python3 bench/cpu_decode/run.py --model "$model" --strata build-bench/engine/strata --threads 6 --isa avx2 \
      --out "$OUT/cpu_decode_${experts}_avx2"
  fi
  rm -f "$model"
done
echo "== done"
