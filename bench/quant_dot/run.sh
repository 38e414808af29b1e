#!/usr/bin/env bash
# Builds quant_dot_bench in Release (no -march=native) and runs it; writes results/<date>-<machine>/results.json
# and a README.md stub. Usage: bench/quant_dot/run.sh [threads, e.g. 1,2,6,16] [blob MB, default 2048] [extra bench args]
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
THREADS="${1:-1,2,6}"
MB="${2:-2048}"
shift $(( $# > 2 ? 2 : $# )) || true
BUILD="${STRATA_BENCH_BUILD:-$REPO/build-bench}"
JOBS="${JOBS:-2}"

cmake -S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_NATIVE=OFF >/dev/null
cmake --build "$BUILD" -j"$JOBS" --target quant_dot_bench
BIN="$(find "$BUILD" -name quant_dot_bench -type f -perm -u+x | head -1)"

MACHINE="$(hostname -s)"
OUT="$HERE/results/$(date +%Y-%m-%d)-$MACHINE"
mkdir -p "$OUT"
"$BIN" --threads "$THREADS" --mb "$MB" "$@" | tee "$OUT/results.json"
if [ ! -f "$OUT/README.md" ]; then
  {
    echo "# quant_dot_bench on $MACHINE, $(date +%Y-%m-%d)"
    echo
    echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) hardware threads."
    echo "Command: \`bench/quant_dot/run.sh $THREADS $MB $*\`"
  } > "$OUT/README.md"
fi
echo "wrote $OUT" >&2
