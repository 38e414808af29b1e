#!/usr/bin/env bash
# Speed of the hybrid expert path on the synthetic full-size model (issue #7, setting (b): a 12 GB PC stand-in,
# --expert-cache 4100-slots --cpu-workers 6): bench/decode.py at 1K context for the all-GPU setting (which records
# the routing profile the cache is filled from) and for (b). Prints: the experts' load (pinning) time and GB/s, the
# prompt tok/s of a 1K-token prompt, the PCIe GB/s of its expert copies, decode tok/s and the per-pass split; then
# (b) again with STRATA_GPU_MISS_SHARE=${MISS_SHARE:-0.75} (that share of each decode pass's missed experts copied
# over PCIe and computed on the GPU while the CPU computes the rest); before that, tests/gpu/pin_speed (ways to pin
# host memory, H2D GB/s from pinned memory). ~90-110 s on the H200. Results under $OUT (decode.json, the engines' logs, hybrid_speed.txt).
# usage: bash tests/gpu/hybrid_speed.sh BUILD_DIR [SYN_MODEL]
set -u -o pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
MODEL=${2:-/tmp/syn-q2_0.gguf}
OUT=${OUT:-tests/gpu/results/latest}/hybrid_speed
mkdir -p "$OUT"
[ -f "$MODEL" ] || { echo "no synthetic model at $MODEL (engine/tools/make_synthetic.py $MODEL --experts q2_0)"; exit 1; }
python3 -c "import gguf" 2>/dev/null || {
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/gguf-*.whl && export PYTHONPATH=/tmp/site; }
# Ways to pin host memory on this machine (tests/gpu/pin_speed.cu, 4 GiB each, ~10 s).
cmake --build "$BUILD" --target pin_speed > "$OUT/pin_speed_build.log" 2>&1 &&
  timeout 40 "$BUILD/engine/pin_speed" 4 > "$OUT/pin_speed.txt" 2>&1; cat "$OUT/pin_speed.txt"
timeout 115 python3 bench/decode.py --strata "$BUILD/engine/strata" --model "$MODEL" --out "$OUT" \
    --contexts 1024 --decode 48 --budget-s 80 --settings gpu,pc12,pc12pcie --miss-share "${MISS_SHARE:-0.75}" \
    > "$OUT/decode_py.log" 2>&1
rc=$?
python3 - "$OUT" <<'PY' | tee "$OUT/hybrid_speed.txt"
import json, re, sys
out = sys.argv[1]
try:
    res = json.load(open(f"{out}/decode.json"))
except Exception as e:
    print(f"no decode.json ({e}); see {out}/decode_py.log"); sys.exit(0)
import os
log = open(f"{out}/pc12.log").read() if os.path.exists(f"{out}/pc12.log") else ""
m = re.search(r"experts pinned: (\d+) MiB in (\d+) ms \(([\d.]+) GB/s\), (\d+) loader threads; (?:cudaHostAlloc|locking) (\d+) ms, copies (\d+) ms", log)
if m:
    print(f"load: {int(m[1]) / 1024:.1f} GiB of experts pinned in {int(m[2]) / 1000:.1f} s = {m[3]} GB/s "
          f"({m[4]} threads; page locking {m[5]} ms, copies {m[6]} ms, summed over threads)")
m = re.search(r"(\d+) MiB of missed experts over PCIe for prompt chunks in (\d+) ms of copies \(([\d.]+) GB/s\)", log)
if m:
    print(f"PCIe: {m[1]} MiB of missed experts in {m[2]} ms of copy-stream time = {m[3]} GB/s (whole run)")
for s, v in res["settings"].items():
    for c, r in v.get("contexts", {}).items():
        line = f"{s} ctx {c}: prompt {r.get('prompt_tok_s')} tok/s ({r.get('prompt_tokens_read')} tokens in {r.get('prompt_ms')} ms"
        if "prompt_pcie_bytes" in r:
            line += f", {r['prompt_pcie_bytes'] / 1e9:.1f} GB over PCIe"
        line += f"); decode {r.get('decode_tok_s')} tok/s"
        if "hit_rate" in r:
            line += f", hit {r['hit_rate']}, split {r['time_split']}, CPU {r.get('cpu_gb_s')} GB/s"
        print(line + (f"; {r['skipped']}" if "skipped" in r else "") + (f"; ERROR {r['error']}" if "error" in r else ""))
    if "error" in v:
        print(f"{s}: ERROR {v['error']}")
PY
for s in pc12 pc12pcie; do
  [ -f "$OUT/$s.log" ] && echo "$s exit: $(grep -h "expert cache: .* slots of" "$OUT/$s.log" | tail -1 | sed 's/.*experts: //')"
done
exit $rc
