#!/usr/bin/env bash
# T = 1 speed of the expert and projection matmuls (issue #7 (a)) on the lent H200, ~90 s:
#   1. bench/cuda_kernels/run.sh: moe_decode_test, moe_gate_up_test, cuda_matmul_speed --decode with the new
#      kernels and with STRATA_CUDA_MOE_DECODE=0 STRATA_CUDA_SPLITK=0 (before), side by side -> $OUT/kernels/
#   2. cuda_ops_test --only moe / shared_expert / fused_quant_bits / gdn_block: CUDA vs CPU on the ops that now take
#      the two-launch experts and split-K                                                   -> $OUT/t1_ops_*.log
#   3. the synthetic model, strata generate 128 tokens: both switches 0 then 1 (decode tok/s, same tokens or not),
#      and a STRATA_CUDA_PROFILE=1 run with both on (per-op table, when the engine prints one) -> $OUT/t1_decode_*
# Writes $OUT/matmul_t1.json (op check failures, decode tok/s, same tokens, the --decode kernel table); prints a short
# summary. Switches: STRATA_CUDA_MOE_DECODE (two-launch experts, default on), STRATA_CUDA_SPLITK (default on),
# STRATA_CUDA_T1_ROWS (4 rows a warp, default off) / STRATA_CUDA_T1_STAGED (rows staged in shared memory, default on).
# usage: bash tests/gpu/matmul_t1.sh BUILD_DIR [SYN_MODEL]   (default /tmp/syn-q2_0.gguf; step 3 skipped when absent)
set -u
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
MODEL=${2:-/tmp/syn-q2_0.gguf}
OUT=${OUT:-tests/gpu/results/latest}
mkdir -p "$OUT/kernels"
rm -f "$OUT"/t1_ops_* "$OUT"/t1_decode_* "$OUT/matmul_t1.json"
rc=0

echo "== 1. kernels"
OUT="$OUT/kernels" bash bench/cuda_kernels/run.sh "$BUILD" || rc=1

echo "== 2. cuda_ops_test (moe, shared_expert, fused_quant_bits, gdn_block)"
for g in moe shared_expert fused_quant_bits gdn_block; do
  timeout 60 "$BUILD/engine/cuda_ops_test" "$OUT/t1_ops_$g.json" --only "$g" > "$OUT/t1_ops_$g.log" 2>&1 || rc=1
  echo "$g: $(grep -cE 'FAIL' "$OUT/t1_ops_$g.log") failed, $(tail -1 "$OUT/t1_ops_$g.log")"
  grep -E "FAIL|error" "$OUT/t1_ops_$g.log" | head -5
done

echo "== 3. synthetic model decode"
if [ -f "$MODEL" ]; then
  PROMPT=$(python3 -c "print(','.join(str(100 + 37 * i % 400) for i in range(32)))")
  for v in 0 1 p; do
    log=$OUT/t1_decode_$v
    sw=$([ $v = 0 ] && echo 0 || echo 1)
    prof=$([ $v = p ] && echo 1 || echo 0)
    env STRATA_CUDA_MOE_DECODE=$sw STRATA_CUDA_SPLITK=$sw STRATA_CUDA_PROFILE=$prof timeout 60 "$BUILD/engine/strata" \
      generate --backend cuda --model "$MODEL" --prompt-ids "$PROMPT" -n 128 --ignore-eos --ctx 512 \
      > "$log.tokens" 2> "$log.log"
    echo "rc $?" >> "$log.log"
    echo "switches $v: $(grep -E 'decode:|rc |error' "$log.log" | tr '\n' ' ')"
  done
  grep -E "moe_experts|shared_expert|in_proj|out_proj|matmul |per decode pass" "$OUT/t1_decode_p.log" | head -16
else
  echo "no $MODEL: skipped"
fi

python3 - "$OUT" <<'PY' || rc=1
import json, os, re, sys
out = sys.argv[1]
res = {"ops": {}, "decode": {}}
for g in ["moe", "shared_expert", "fused_quant_bits", "gdn_block"]:
    p = f"{out}/t1_ops_{g}.log"
    res["ops"][g] = {"failed": open(p).read().count("FAIL") if os.path.exists(p) else None}
for v in ["0", "1", "p"]:
    p = f"{out}/t1_decode_{v}.log"
    if not os.path.exists(p):
        continue
    log = open(p).read()
    d = re.search(r"decode: (\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s\)", log)
    res["decode"][v] = {"tok_s": float(d.group(3)) if d else None, "rc": int(re.search(r"rc (\d+)", log).group(1))}
t = [open(f"{out}/t1_decode_{v}.tokens").read().strip() for v in "01" if os.path.exists(f"{out}/t1_decode_{v}.tokens")]
res["decode"]["same_tokens_0_1"] = len(t) == 2 and t[0] == t[1] and t[0] != ""
k = f"{out}/kernels/speed_decode.json"
if os.path.exists(k):
    res["kernels"] = [{key: r[key] for key in ("group", "name", "type", "T", "us", "GBps")} for r in json.load(open(k))["results"]]
json.dump(res, open(f"{out}/matmul_t1.json", "w"), indent=1)
print("decode tok/s (switches 0 / 1 / 1+profile):", {v: res["decode"].get(v, {}).get("tok_s") for v in "01p"},
      "same tokens:", res["decode"]["same_tokens_0_1"])
bad = any(o["failed"] for o in res["ops"].values()) or any(d.get("rc") for k, d in res["decode"].items() if isinstance(d, dict))
sys.exit(1 if bad else 0)
PY
echo "== matmul_t1 done, rc $rc"
exit $rc
