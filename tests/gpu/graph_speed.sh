#!/usr/bin/env bash
# Decode speed of the CUDA backend with CUDA graphs off and on (STRATA_CUDA_GRAPHS=0 / 1): strata generate, greedy,
# 128 tokens after a 32-token prompt, per model. Both runs must give the same tokens. Writes $OUT/graph_speed.json
# (decode tok/s of each run, same_tokens, the engine's "graphs:" line: passes, updates, instantiations).
# usage: tests/gpu/graph_speed.sh BUILD_DIR [MODEL.gguf ...]   (default model: the synthetic /tmp/syn-q2_0.gguf)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-tests/gpu/results/latest}
BIN=${1:-build-gpu}/engine/strata
shift || true
MODELS=("$@")
[ ${#MODELS[@]} -gt 0 ] || MODELS=("${SYN_MODEL:-/tmp/syn-q2_0.gguf}")
mkdir -p "$OUT"
PROMPT=$(python3 -c "print(','.join(str(100 + 37 * i % 400) for i in range(32)))")
for model in "${MODELS[@]}"; do
  name=$(basename "$model" .gguf)
  for g in 0 1; do
    STRATA_CUDA_GRAPHS=$g timeout 150 "$BIN" generate --backend cuda --model "$model" --prompt-ids "$PROMPT" -n 128 \
        --ignore-eos --ctx 512 > "$OUT/graphs_${name}_$g.tokens" 2> "$OUT/graphs_${name}_$g.log"
    echo "rc $?" >> "$OUT/graphs_${name}_$g.log"
    echo "== $name STRATA_CUDA_GRAPHS=$g"
    grep -E "decode:|graphs:|rc |error" "$OUT/graphs_${name}_$g.log"
  done
done
python3 - "$OUT" "${MODELS[@]}" <<'PY'
import json, os, re, sys
out, models = sys.argv[1], sys.argv[2:]
results = []
for m in models:
    name = os.path.basename(m)[:-5] if m.endswith(".gguf") else os.path.basename(m)
    r = {"model": m}
    toks = {}
    for g in "01":
        log = open(f"{out}/graphs_{name}_{g}.log").read()
        toks[g] = open(f"{out}/graphs_{name}_{g}.tokens").read().strip()
        d = re.search(r"decode: (\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s\)", log)
        gl = re.search(r"graphs: .*", log)
        r["graphs_" + g] = {"decode_tok_s": float(d.group(3)) if d else None, "graphs": gl.group(0) if gl else None,
                            "rc": int(re.search(r"rc (\d+)", log).group(1))}
    r["same_tokens"] = bool(toks["0"]) and toks["0"] == toks["1"]
    results.append(r)
json.dump({"results": results}, open(f"{out}/graph_speed.json", "w"), indent=1)
print(json.dumps(results, indent=1))
ok = all(r["same_tokens"] and r["graphs_0"]["rc"] == 0 and r["graphs_1"]["rc"] == 0 for r in results)
sys.exit(0 if ok else 1)
PY
