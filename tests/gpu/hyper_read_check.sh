#!/usr/bin/env bash
# The fused hyper-connection read (kernels/hyper_read.cu, issue #7): its checks in cuda_ops_test (CUDA vs CPU, both
# activation modes, and that the three-kernel path ran), then decode speed with it off and on
# (STRATA_CUDA_FUSED_HYPER=0 / 1, CUDA graphs on): strata generate, greedy, 64 tokens after a 32-token prompt.
# Writes $OUT/hyper_read.json (tok/s per run, whether the tokens agree) and the logs. ~2-3 minutes on an H200 with the
# synthetic model already made (tests/gpu/issue7_round.sh makes /tmp/syn-q2_0.gguf; skipped when absent).
# usage: [SKIP_OPS=1] tests/gpu/hyper_read_check.sh BUILD_DIR [MODEL.gguf ...]
#        (default models: the synthetic one, .gpu-models/tiny-{q2_0,iq2_xs}.gguf, those present)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-tests/gpu/results/latest}
BUILD=${1:-build-gpu}
shift || true
MODELS=("$@")
if [ ${#MODELS[@]} -eq 0 ]; then
  for m in "${SYN_MODEL:-/tmp/syn-q2_0.gguf}" .gpu-models/tiny-q2_0.gguf .gpu-models/tiny-iq2_xs.gguf; do
    [ -f "$m" ] && MODELS+=("$m")
  done
fi
mkdir -p "$OUT"
rc=0
if [ "${SKIP_OPS:-0}" != 1 ]; then   # SKIP_OPS=1 when tests/gpu/run.sh has just run cuda_ops_test
  echo "== cuda_ops_test (hyper_read lines)"
  timeout 240 "$BUILD/engine/cuda_ops_test" "$OUT/hyper_read_ops.json" > "$OUT/hyper_read_ops.log" 2>&1
  echo "cuda_ops_test rc $?" >> "$OUT/hyper_read_ops.log"
  grep -E "hyper_read|checks|error" "$OUT/hyper_read_ops.log"
  grep -E "hyper_read.*FAIL" -q "$OUT/hyper_read_ops.log" && rc=1
fi
PROMPT=$(python3 -c "print(','.join(str(100 + 37 * i % 400) for i in range(32)))")
for model in "${MODELS[@]}"; do
  name=$(basename "$model" .gguf)
  for f in 0 1; do
    STRATA_CUDA_FUSED_HYPER=$f timeout 150 "$BUILD/engine/strata" generate --backend cuda --model "$model" \
        --prompt-ids "$PROMPT" -n 64 --ignore-eos --ctx 512 > "$OUT/hyper_${name}_$f.tokens" 2> "$OUT/hyper_${name}_$f.log"
    echo "rc $?" >> "$OUT/hyper_${name}_$f.log"
    echo "== $name STRATA_CUDA_FUSED_HYPER=$f"
    grep -E "decode:|graphs:|rc |error" "$OUT/hyper_${name}_$f.log"
  done
done
python3 - "$OUT" "${MODELS[@]}" <<'PY' || rc=1
import json, re, sys, os
out, models = sys.argv[1], sys.argv[2:]
results = []
for m in models:
    name = os.path.basename(m)[:-5]
    r = {"model": m}
    toks = {}
    for f in "01":
        log = open(f"{out}/hyper_{name}_{f}.log").read()
        toks[f] = open(f"{out}/hyper_{name}_{f}.tokens").read().strip().split(",")
        d = re.search(r"decode: (\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s\)", log)
        r["fused_" + f] = {"decode_tok_s": float(d.group(3)) if d else None,
                           "rc": int(re.search(r"rc (\d+)", log).group(1))}
    same = 0
    while same < min(len(toks["0"]), len(toks["1"])) and toks["0"][same] == toks["1"][same]:
        same += 1
    r["same_tokens"] = toks["0"] != [""] and toks["0"] == toks["1"]
    r["tokens_agreeing_from_start"] = same
    results.append(r)
json.dump({"results": results}, open(f"{out}/hyper_read.json", "w"), indent=1)
print(json.dumps(results, indent=1))
sys.exit(0 if all(r["fused_0"]["rc"] == 0 and r["fused_1"]["rc"] == 0 for r in results) else 1)
PY
exit $rc
