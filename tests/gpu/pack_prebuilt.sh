#!/usr/bin/env bash
# Builds the CUDA executables a device round needs here (sm_90, build-cuda) and packs them for the device call's
# `carry` (tests/gpu/round.sh with PREBUILT=build-cuda/carry): the executables stripped into build-cuda/carry/engine,
# xz-compressed into build-cuda/carry.tar.xz (~10-12 MB of the 64 MiB a call carries). Also writes the tiny models
# (.gpu-models, tests/gpu/prepare_models.py --set d) and the gguf wheel (.whl) the round uses when they are missing.
# Then, on the device: tar xJf build-cuda/carry.tar.xz -C build-cuda && PREBUILT=build-cuda/carry bash tests/gpu/round.sh ...
# usage: [BASE=STRATA] tests/gpu/pack_prebuilt.sh [TARGET ...]   (default: the round's usual executables; BASE: an
#        older engine build carried as engine/strata_base, for round.sh's abbin step)
set -euo pipefail
cd "$(dirname "$0")/../.."
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(strata cuda_ops_test decode_host_test dot_host_test moe_decode_test cuda_matmul_speed
                                     kernel_boundary staged_phases cpu_pool_bench t1_ops strata_kernel_trace)
PY=${PYTHON:-.venv/bin/python}
[ -d build-cuda ] || cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null
ninja -C build-cuda -j "$(nproc)" "${TARGETS[@]}"
rm -rf build-cuda/carry
mkdir -p build-cuda/carry/engine
for t in "${TARGETS[@]}"; do   # an executable, or a shared library (lib$t.so: the CUPTI kernel tracer)
  if [ -f "build-cuda/engine/$t" ]; then cp "build-cuda/engine/$t" build-cuda/carry/engine/
  else cp "build-cuda/engine/lib$t.so" build-cuda/carry/engine/; fi
done
[ -z "${BASE:-}" ] || cp "$BASE" build-cuda/carry/engine/strata_base
strip build-cuda/carry/engine/*
tar -C build-cuda -cf - carry | xz -9 -T"$(nproc)" > build-cuda/carry.tar.xz
[ -d .gpu-models ] || "$PY" tests/gpu/prepare_models.py --set d
ls .whl/gguf-*.whl > /dev/null 2>&1 || "$PY" -m pip download -q --no-deps gguf -d .whl
echo "packed: build-cuda/carry.tar.xz ($(du -h build-cuda/carry.tar.xz | cut -f1)): ${TARGETS[*]}"
echo 'carry: [".gpu-models", ".whl", "build-cuda/carry.tar.xz"]'
