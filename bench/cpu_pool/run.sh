#!/usr/bin/env bash
# CPU expert pool on the decode shape (issue #7, hybrid path): runs BUILD_DIR's cpu_pool_bench (builds nothing) and
# writes JSON + a summary under $OUT. Usage: bash bench/cpu_pool/run.sh BUILD_DIR
# Runs: 1-N workers x k 2..6 back to back; the last worker count at k=4 with GAP_US idle between layers (the GPU's
# share of a hybrid layer), on transparent huge pages (the others use 4 KB pages, like the hybrid's cudaHostAlloc
# copies), and at each STRATA_CPU_PREFETCH_KB in PREFETCH_KB (the others use the engine's default). ~15-40 s.
# Env: WORKERS (default 1,2,4,6 capped at the core count), MB (expert blob, default 1024), GAP_US (default 300),
# PREFETCH_KB (default "0 16,0 64,0 128,0 16,8 16,32": start[,ahead] KB, see engine/src/backend/cpu/moe_cpu.cpp).
set -euo pipefail
BUILD="${1:?usage: bash bench/cpu_pool/run.sh BUILD_DIR}"
BIN="$BUILD/engine/cpu_pool_bench"
[ -x "$BIN" ] || { echo "no $BIN: build the target cpu_pool_bench first" >&2; exit 2; }
OUT="${OUT:-$(mktemp -d /tmp/cpu_pool.XXXX)}"
mkdir -p "$OUT"
CORES="$(nproc)"
if [ -z "${WORKERS:-}" ]; then
  WORKERS=1
  for w in 2 4 6; do if [ "$w" -le "$CORES" ]; then WORKERS="$WORKERS,$w"; fi; done
fi
MB="${MB:-1024}"
GAP_US="${GAP_US:-300}"
LAST="${WORKERS##*,}"

git -C "$(dirname "$0")" log -1 --format='%H %s' > "$OUT/commit.txt" 2>/dev/null || true
lscpu > "$OUT/lscpu.txt" 2>/dev/null || true
# Back to back: the pool's own cost per layer. The A/B runs after it (one worker count, k=4, no ceilings) start only
# while under 45 s have passed, so the whole script stays within ~60 s.
timeout 45 "$BIN" --workers "$WORKERS" --k 2,3,4,5,6 --mb "$MB" --passes 5 --gap-us 0 > "$OUT/back_to_back.json"
cat /sys/kernel/mm/transparent_hugepage/enabled > "$OUT/thp.txt" 2>/dev/null || true
NAMES="back_to_back"
ab_run() {  # name [VAR=value ...]; bench arguments beyond the common ones in EXTRA
  local name=$1; shift
  if [ "$SECONDS" -ge 45 ]; then echo "skipped $name: ${SECONDS} s passed" >&2; return; fi
  env "$@" timeout 15 "$BIN" --workers "$LAST" --k 4 --mb "$MB" --passes 5 --ceilings 0 "${EXTRA[@]}" \
      > "$OUT/$name.json" && NAMES="$NAMES $name"
}
EXTRA=(--gap-us "$GAP_US"); ab_run gap   # workers idle between layers, as in the hybrid decode
EXTRA=(--hugepages 1); ab_run hugepages
EXTRA=()
for kb in ${PREFETCH_KB:-0 16,0 64,0 128,0 16,8 16,32}; do
  ab_run "prefetch_$(echo "$kb" | tr ',' '_')" STRATA_CPU_PREFETCH_KB="$kb"
done
python3 - "$OUT" $NAMES <<'PY' | tee "$OUT/summary.txt"
import json, sys
out = sys.argv[1]
for name in sys.argv[2:]:
    d = json.load(open(f"{out}/{name}.json"))
    print(f"{name} (gap {d['gap_us']} us, huge pages {d.get('hugepages', False)}, {d['cpu']}, isa {d['isa']}):")
    print("  workers  k   GB/s  GB/s@median  us/layer median  p90 | phases us: quant_x gate_up down"
          " | DRAM read  gemv stream GB/s")
    for r in d["runs"]:
        ph = r.get("phase_us_per_layer", {"quantize_x": -1, "gate_up": -1, "down": -1})   # -1: an older binary
        print(f"  {r['workers']:>7} {r['k']:>2} {r['gbs']:>6.1f} {r['gbs_at_median']:>11.1f} {r['us_per_layer_median']:>16.0f}"
              f" {r['us_per_layer_p90']:>5.0f} | {ph['quantize_x']:>17.1f} {ph['gate_up']:>7.1f} {ph['down']:>5.1f} | {r['dram_read_gbs']:>9.1f} {r['gemv_stream_gbs']:>11.1f}")
PY
echo "wrote $OUT"
