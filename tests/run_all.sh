#!/usr/bin/env bash
# The one test command (README; .ci/run calls exactly this). On a fresh Linux machine it:
#   1. makes .venv and installs the test requirements (CPU torch, transformers, the official SDKs, playwright),
#   2. installs Debian's chromium for the page tests if missing,
#   3. builds the engine (Release, CPU) and an AddressSanitizer/UBSan build, and compiles the CUDA sources for
#      sm_90 when nvcc is present (so they cannot rot; there is no GPU here to run them) and runs their host-side
#      checks (decode_host_test, dot_host_test),
#   4. cross-compiles strata.exe for Windows (MinGW-w64) and checks it under wine against the Linux build,
#   5. runs ctest on both builds, pytest on everything, and the file-error tests again on the sanitizer build.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
JOBS=${STRATA_JOBS:-2}
export PYTHONUNBUFFERED=1

step() { printf '\n=== %s (%ss)\n' "$*" "$SECONDS"; }

step "Python environment"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q -r requirements-dev.txt
PY="$REPO/.venv/bin/python"

step "Browser for the page tests"
bash tests/e2e/install_browser.sh

step "Engine: Release build"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$JOBS"

step "Engine: AddressSanitizer + UBSan build"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$JOBS"

if command -v nvcc >/dev/null 2>&1 && ls engine/src/backend/cuda/*.cu >/dev/null 2>&1; then
  step "Engine: CUDA sources for sm_90 (compiled; the host-run checks of the CUDA decoders and dots)"
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
  cmake --build build-cuda -j "$JOBS" --target strata decode_host_test dot_host_test
  # the CUPTI kernel tracer of tests/gpu/graph_timeline.py, where the toolkit has CUPTI (CMake defines it then)
  if grep -q "strata_kernel_trace" build-cuda/build.ninja; then
    cmake --build build-cuda -j "$JOBS" --target strata_kernel_trace
  fi
  # No GPU here: these run the CUDA block decoders, the integer chunk dots and the tensor-core tile math (mma
  # emulated from the PTX fragment layouts) on the host, against the CPU's kernels.
  build-cuda/engine/decode_host_test | tail -1
  build-cuda/engine/dot_host_test | tail -1
fi

step "Engine: Windows cross-compile (MinGW-w64) and a run under wine"
PY="$PY" STRATA_BUILD="$REPO/build" bash tests/windows/cross_build.sh

step "ctest (Release, then sanitizers)"
ctest --test-dir build --output-on-failure
ASAN_OPTIONS=detect_leaks=0 ctest --test-dir build-asan --output-on-failure

step "pytest: file errors and block formats on the sanitizer build"
ASAN_OPTIONS=detect_leaks=0 STRATA_BUILD="$REPO/build-asan" "$PY" -m pytest -q -p no:cacheprovider tests/engine tests/formats

step "pytest: everything on the Release build"
STRATA_BUILD="$REPO/build" "$PY" -m pytest -q -p no:cacheprovider tests

step "done"
