#!/usr/bin/env bash
# The tiled prompt kernels (kernels/matmul_tiled.cu, issue #7): their cuda_ops_test lines (matmul T = 32..257 in all
# formats, moe_experts E = 64 T = 40/200, both activation modes), the prompt group of cuda_matmul_speed (T = 256/1024),
# tiny models with a 300-token prompt (tiled off / on / CPU: same greedy tokens?), and prompt speed on the synthetic
# full-size model (STRATA_CUDA_TILED=0 at 256 tokens; =1 at 256 and 4000 tokens, chunk 1024).
# Writes $OUT/prefill.json and the logs. ~2-3 minutes on an H200 with the synthetic model already made.
# usage: [SKIP_OPS=1 [OPS_LOG=run.sh's ops.log]] tests/gpu/prefill_check.sh [BUILD_DIR] [SYNTHETIC.gguf]
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-tests/gpu/results/latest}
BUILD=${1:-build-gpu}
SYN=${2:-${SYN_MODEL:-/tmp/syn-q2_0.gguf}}
BIN="$BUILD/engine"
mkdir -p "$OUT"
rc=0
if [ ! -x "$BIN/strata" ] || [ ! -x "$BIN/cuda_ops_test" ] || [ ! -x "$BIN/cuda_matmul_speed" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null &&
    cmake --build "$BUILD" -j "$(nproc)" --target strata cuda_ops_test cuda_matmul_speed > "$OUT/prefill_build.log" 2>&1 ||
    { tail -30 "$OUT/prefill_build.log"; exit 1; }
fi
if [ "${SKIP_OPS:-0}" != 1 ]; then   # SKIP_OPS=1 when tests/gpu/run.sh has just run cuda_ops_test (its ops.log)
  timeout 240 "$BIN/cuda_ops_test" "$OUT/prefill_ops.json" > "$OUT/prefill_ops.log" 2>&1
  echo "cuda_ops_test rc $?" >> "$OUT/prefill_ops.log"
  OPS_LOG="$OUT/prefill_ops.log"
else
  OPS_LOG=${OPS_LOG:-$OUT/ops.log}
fi
[ -f "$OPS_LOG" ] || { echo "no cuda_ops_test log at $OPS_LOG"; OPS_LOG=/dev/null; }
echo "== cuda_ops_test, tiled lines ($OPS_LOG)"
grep -E "T=(32|64|100|257)|E=64|checks|error|rc " "$OPS_LOG" | grep -E "FAIL|E=64|checks|error|rc " | head -40
echo "tiled matmul lines: $(grep -cE 'matmul .*T=(32|64|100|257).* ok' "$OPS_LOG") ok, $(grep -cE 'T=(32|64|100|257|40|200).*FAIL' "$OPS_LOG") FAIL"
grep -qE "T=(32|64|100|257|40|200).*FAIL" "$OPS_LOG" && rc=1

echo "== cuda_matmul_speed --prompt"
timeout 120 "$BIN/cuda_matmul_speed" "$OUT/prompt_speed.json" --prompt 2>&1 | tee "$OUT/prompt_speed.log" || rc=1

ids() { python3 -c "print(','.join(str(100 + (37 * i + i // 400) % 400) for i in range($1)))"; }
run_gen() {   # name tiled backend model prompt_len extra...
  local name=$1 tiled=$2 be=$3 model=$4 len=$5
  shift 5
  STRATA_CUDA_TILED=$tiled timeout 150 "$BIN/strata" generate --backend "$be" --model "$model" --prompt-ids "$(ids "$len")" \
      -n 8 --ignore-eos "$@" > "$OUT/prefill_$name.tokens" 2> "$OUT/prefill_$name.log"
  echo "rc $?" >> "$OUT/prefill_$name.log"
  echo "$name: $(grep -E 'prompt:|rc |error' "$OUT/prefill_$name.log" | tr '\n' ' ')"
}
RUNS=()
for m in .gpu-models/tiny-q2_0.gguf .gpu-models/tiny-iq2_xs.gguf; do
  [ -f "$m" ] || continue
  n=$(basename "$m" .gguf)
  run_gen "${n}_cpu" 1 cpu "$m" 300 --ctx 512
  run_gen "${n}_tiled0" 0 cuda "$m" 300 --ctx 512
  run_gen "${n}_tiled1" 1 cuda "$m" 300 --ctx 512
  RUNS+=("${n}_cpu" "${n}_tiled0" "${n}_tiled1")
done
if [ -f "$SYN" ]; then
  run_gen syn_256_tiled0 0 cuda "$SYN" 256 --ctx 4200 --chunk 1024
  for len in 256 4000; do
    run_gen "syn_${len}_tiled1" 1 cuda "$SYN" "$len" --ctx 4200 --chunk 1024
    RUNS+=("syn_${len}_tiled1")
  done
  RUNS+=(syn_256_tiled0)
else
  echo "no synthetic model at $SYN (tests/gpu/issue7_round.sh speed makes it): speed runs skipped"
fi
python3 - "$OUT" "${RUNS[@]}" <<'PY' || rc=1
import json, re, sys
out, names = sys.argv[1], sys.argv[2:]
runs = {}
for n in names:
    log = open(f"{out}/prefill_{n}.log").read()
    p = re.search(r"prompt: (\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s\)", log)
    runs[n] = {"rc": int(re.search(r"rc (\d+)", log).group(1)),
               "prompt_tokens": int(p.group(1)) if p else None, "prompt_s": float(p.group(2)) if p else None,
               "prompt_tok_s": float(p.group(3)) if p else None,
               "tokens": open(f"{out}/prefill_{n}.tokens").read().strip()}
agree = {}
def same(a, b):   # None when either run gave no tokens
    return runs[a]["tokens"] == runs[b]["tokens"] if runs[a]["tokens"] and runs[b]["tokens"] else None
for n in names:
    if n.endswith("_cpu"):
        base = n[:-4]
        agree[base] = {"tiled0_vs_cpu": same(base + "_tiled0", n), "tiled1_vs_cpu": same(base + "_tiled1", n),
                       "tiled1_vs_tiled0": same(base + "_tiled1", base + "_tiled0")}
if "syn_256_tiled0" in runs:
    agree["syn_256"] = {"tiled1_vs_tiled0": same("syn_256_tiled1", "syn_256_tiled0")}
json.dump({"runs": runs, "agree": agree}, open(f"{out}/prefill.json", "w"), indent=1)
print(json.dumps(agree, indent=1))
for n, r in runs.items():
    print(f"{n:28s} rc {r['rc']}  prompt {r['prompt_tokens']} tokens {r['prompt_s']} s  {r['prompt_tok_s']} tok/s")
sys.exit(0 if all(r["rc"] == 0 for r in runs.values()) else 1)
PY
exit $rc
