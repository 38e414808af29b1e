#!/usr/bin/env bash
# Decode speed of the CUDA backend with the fused MoE block off and on (STRATA_CUDA_FUSED_MOE=0 / 1: moe_gate_up for
# routed and shared experts, the shared expert's gate+add kernel): strata generate, greedy, 128 tokens after a
# 32-token prompt, per model; also the shared_expert lines of cuda_ops_test when its log is given (OPS_LOG) or run.
# Writes $OUT/fused_moe_speed.json (decode tok/s of each run, whether the tokens agree: they may differ on the random
# synthetic model, since h's Q8 quantization moves by float rounding; parity.py checks tokens on the tiny models).
# usage: tests/gpu/fused_moe_speed.sh BUILD_DIR [MODEL.gguf ...]   (default model: the synthetic /tmp/syn-q2_0.gguf)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-tests/gpu/results/latest}
BUILD=${1:-build-gpu}
BIN=$BUILD/engine/strata
shift || true
MODELS=("$@")
[ ${#MODELS[@]} -gt 0 ] || MODELS=("${SYN_MODEL:-/tmp/syn-q2_0.gguf}")
mkdir -p "$OUT"
if [ -z "${OPS_LOG:-}" ]; then
  OPS_LOG=$OUT/fused_moe_ops.log
  timeout 180 "$BUILD/engine/cuda_ops_test" > "$OPS_LOG" 2>&1; echo "cuda_ops_test rc $?" >> "$OPS_LOG"
fi
echo "== cuda_ops_test shared_expert checks"
grep -E "shared_expert" "$OPS_LOG" | grep -c " ok$" | sed 's/^/ok: /'
grep -E "shared_expert.*FAIL|error|rc " "$OPS_LOG"
PROMPT=$(python3 -c "print(','.join(str(100 + 37 * i % 400) for i in range(32)))")
for model in "${MODELS[@]}"; do
  name=$(basename "$model" .gguf)
  for f in 0 1; do
    STRATA_CUDA_FUSED_MOE=$f timeout 150 "$BIN" generate --backend cuda --model "$model" --prompt-ids "$PROMPT" -n 128 \
        --ignore-eos --ctx 512 > "$OUT/fmoe_${name}_$f.tokens" 2> "$OUT/fmoe_${name}_$f.log"
    echo "rc $?" >> "$OUT/fmoe_${name}_$f.log"
    echo "== $name STRATA_CUDA_FUSED_MOE=$f"
    grep -E "decode:|rc |error" "$OUT/fmoe_${name}_$f.log"
  done
done
python3 - "$OUT" "$OPS_LOG" "${MODELS[@]}" <<'PY'
import json, os, re, sys
out, ops_log, models = sys.argv[1], sys.argv[2], sys.argv[3:]
ops = [l for l in open(ops_log).read().splitlines() if "shared_expert" in l]
results = {"shared_expert_checks": len(ops), "shared_expert_failed": sum("FAIL" in l for l in ops), "runs": []}
for m in models:
    name = os.path.basename(m)[:-5] if m.endswith(".gguf") else os.path.basename(m)
    r = {"model": m}
    toks = {}
    for f in "01":
        log = open(f"{out}/fmoe_{name}_{f}.log").read()
        toks[f] = open(f"{out}/fmoe_{name}_{f}.tokens").read().strip()
        d = re.search(r"decode: (\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s\)", log)
        r["fused_" + f] = {"decode_tok_s": float(d.group(3)) if d else None,
                           "rc": int(re.search(r"rc (\d+)", log).group(1))}
    r["same_tokens"] = bool(toks["0"]) and toks["0"] == toks["1"]
    results["runs"].append(r)
json.dump(results, open(f"{out}/fused_moe_speed.json", "w"), indent=1)
print(json.dumps(results, indent=1))
ok = results["shared_expert_checks"] > 0 and results["shared_expert_failed"] == 0 and \
     all(r["fused_0"]["rc"] == 0 and r["fused_1"]["rc"] == 0 for r in results["runs"])
sys.exit(0 if ok else 1)
PY
