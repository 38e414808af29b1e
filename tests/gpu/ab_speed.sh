#!/usr/bin/env bash
# Decode A/B of one CUDA switch (issue #7): strata generate, greedy, 128 tokens after a 32-token prompt, with VAR=0
# then VAR=1, REPEAT times (default 1), per model. Writes $OUT/ab_VAR.json: decode tok/s of each run, the engine's
# "graphs:" line when present, whether both settings gave the same tokens. Fails on an engine error, and on differing
# tokens when SAME=1 (switches that must not change a bit: STRATA_CUDA_GRAPHS, STRATA_CUDA_FUSED_QUANT; fused kernels
# whose Q8 activations move by float rounding may differ on the random synthetic model: parity.py checks tokens on
# the tiny models).
# usage: [SAME=1] [REPEAT=n] tests/gpu/ab_speed.sh VAR BUILD_DIR [MODEL.gguf ...]   (default: /tmp/syn-q2_0.gguf)
set -u
cd "$(dirname "$0")/../.."
VAR=$1
BIN=${2:-build-gpu}/engine/strata
shift 2 || true
MODELS=("$@")
[ ${#MODELS[@]} -gt 0 ] || MODELS=("${SYN_MODEL:-/tmp/syn-q2_0.gguf}")
OUT=${OUT:-tests/gpu/results/latest}
mkdir -p "$OUT"
PROMPT=$(python3 -c "print(','.join(str(100 + 37 * i % 400) for i in range(32)))")
for model in "${MODELS[@]}"; do
  name=$(basename "$model" .gguf)
  for run in $(seq 1 "${REPEAT:-1}"); do
    for v in 0 1; do
      log=$OUT/ab_${VAR}_${name}_${v}_${run}
      env "$VAR=$v" timeout 150 "$BIN" generate --backend cuda --model "$model" --prompt-ids "$PROMPT" -n 128 \
          --ignore-eos --ctx 512 > "$log.tokens" 2> "$log.log"
      echo "rc $?" >> "$log.log"
      echo "== $name $VAR=$v ($run): $(grep -E 'decode:|graphs:|rc |error' "$log.log" | tr '\n' ' ')"
    done
  done
done
VAR=$VAR REPEAT=${REPEAT:-1} SAME=${SAME:-0} python3 - "$OUT" "${MODELS[@]}" <<'PY'
import json, os, re, sys
out, models = sys.argv[1], sys.argv[2:]
var, repeat, same_required = os.environ["VAR"], int(os.environ["REPEAT"]), os.environ["SAME"] == "1"
results, ok = [], True
for m in models:
    name = os.path.basename(m)[:-5] if m.endswith(".gguf") else os.path.basename(m)
    r, toks = {"model": m}, set()
    for v in "01":
        runs = []
        for run in range(1, repeat + 1):
            path = f"{out}/ab_{var}_{name}_{v}_{run}"
            log = open(path + ".log").read()
            toks.add(open(path + ".tokens").read().strip())
            d = re.search(r"decode: (\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s\)", log)
            g = re.search(r"graphs: .*", log)
            rc = int(re.search(r"rc (\d+)", log).group(1))
            ok = ok and rc == 0
            runs.append({"decode_tok_s": float(d.group(3)) if d else None, "rc": rc,
                         "graphs": g.group(0) if g else None})
        r[f"{var}={v}"] = runs
    r["same_tokens"] = len(toks) == 1 and "" not in toks
    ok = ok and (r["same_tokens"] or not same_required)
    results.append(r)
json.dump({"switch": var, "same_required": same_required, "results": results},
          open(f"{out}/ab_{var}.json", "w"), indent=1)
print(json.dumps(results, indent=1))
sys.exit(0 if ok else 1)
PY
