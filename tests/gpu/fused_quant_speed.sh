#!/usr/bin/env bash
# Decode A/B of the fused activation quantization (STRATA_CUDA_FUSED_QUANT=0 / 1, issue #7): the fused == unfused
# bit checks of cuda_ops_test (from OPS_LOG, run.sh's ops.log, when given), then strata generate, greedy, 128 tokens
# after a 32-token prompt, 0 then 1, REPEAT times (default 1). Both settings must give the same tokens. Writes
# $OUT/fused_quant_speed.json (decode tok/s of each run, same_tokens).
# usage: tests/gpu/fused_quant_speed.sh BUILD_DIR [MODEL.gguf ...]   (default model: the synthetic /tmp/syn-q2_0.gguf)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-tests/gpu/results/latest}
BIN=${1:-build-gpu}/engine/strata
shift || true
MODELS=("$@")
[ ${#MODELS[@]} -gt 0 ] || MODELS=("${SYN_MODEL:-/tmp/syn-q2_0.gguf}")
mkdir -p "$OUT"
if [ -n "${OPS_LOG:-}" ] && [ -f "$OPS_LOG" ]; then
  echo "== cuda_ops_test fused quant checks: $(grep -c 'fused quant == unfused' "$OPS_LOG") run," \
       "$(grep 'fused quant == unfused' "$OPS_LOG" | grep -c FAIL) FAIL"
  grep 'fused quant == unfused' "$OPS_LOG" | grep FAIL | head -10
fi
PROMPT=$(python3 -c "print(','.join(str(100 + 37 * i % 400) for i in range(32)))")
for model in "${MODELS[@]}"; do
  name=$(basename "$model" .gguf)
  for run in $(seq 1 "${REPEAT:-1}"); do
    for f in 0 1; do
      STRATA_CUDA_FUSED_QUANT=$f timeout 120 "$BIN" generate --backend cuda --model "$model" --prompt-ids "$PROMPT" \
          -n 128 --ignore-eos --ctx 512 > "$OUT/fq_${name}_${f}${run}.tokens" 2> "$OUT/fq_${name}_${f}${run}.log"
      echo "rc $?" >> "$OUT/fq_${name}_${f}${run}.log"
      echo "== $name STRATA_CUDA_FUSED_QUANT=$f ($run)"
      grep -E "decode:|rc |error" "$OUT/fq_${name}_${f}${run}.log"
    done
  done
done
REPEAT=${REPEAT:-1} python3 - "$OUT" "${MODELS[@]}" <<'PY'
import json, os, re, sys
out, models = sys.argv[1], sys.argv[2:]
results = []
for m in models:
    name = os.path.basename(m)[:-5] if m.endswith(".gguf") else os.path.basename(m)
    r = {"model": m}
    toks = set()
    ok = True
    for f in "01":
        runs = []
        for run in range(1, int(os.environ["REPEAT"]) + 1):
            log = open(f"{out}/fq_{name}_{f}{run}.log").read()
            toks.add(open(f"{out}/fq_{name}_{f}{run}.tokens").read().strip())
            d = re.search(r"decode: (\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s\)", log)
            rc = int(re.search(r"rc (\d+)", log).group(1))
            ok = ok and rc == 0
            runs.append({"decode_tok_s": float(d.group(3)) if d else None, "rc": rc})
        r["fused_" + f] = runs
    r["same_tokens"] = len(toks) == 1 and "" not in toks
    r["ok"] = ok and r["same_tokens"]
    results.append(r)
json.dump({"results": results}, open(f"{out}/fused_quant_speed.json", "w"), indent=1)
print(json.dumps(results, indent=1))
sys.exit(0 if all(r["ok"] for r in results) else 1)
PY
