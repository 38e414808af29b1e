#!/usr/bin/env bash
# The fused GDN block and the per-op GPU profile (issue #7) on the lent H200, ~90 s:
#   1. cuda_ops_test --only gdn_block: Backend::gdn_block CUDA vs CPU (both activation modes, fused and unfused)
#   2. tests/gpu/parity.py on three tiny models of .gpu-models (tiny, tiny8, wide256: d 16/32/64), CUDA vs CPU
#   3. decode tok/s on the synthetic model with STRATA_CUDA_FUSED_GDN=0 / 1 (strata generate, 128 tokens)
#   4. STRATA_CUDA_PROFILE=1 tables from strata --serve: 64 tokens after a 32-token prompt (fused off and on) and
#      after a 1024-token prompt (fused on)
# Writes $OUT/gdn_fused.json and the logs; prints a short summary.
# usage: bash tests/gpu/gdn_fused.sh BUILD_DIR [SYN_MODEL]   (default /tmp/syn-q2_0.gguf; steps 3-4 skipped when absent)
set -u
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
MODEL=${2:-/tmp/syn-q2_0.gguf}
OUT=${OUT:-tests/gpu/results/latest}
BIN=$BUILD/engine
mkdir -p "$OUT"
rm -f "$OUT"/gdn_ops.* "$OUT"/gdn_parity.* "$OUT"/gdn_decode_* "$OUT"/gdn_profile_* "$OUT"/gdn_fused.json
rc=0

echo "== 1. cuda_ops_test --only gdn_block"
timeout 60 "$BIN/cuda_ops_test" "$OUT/gdn_ops.json" --only gdn_block > "$OUT/gdn_ops.log" 2>&1 || rc=1
grep -E "FAIL|error|checks" "$OUT/gdn_ops.log" | head -20

echo "== 2. tiny-model parity"
MODELS_DIR=.gpu-models
if [ -f "$MODELS_DIR/manifest.json" ]; then
  SUB=$(mktemp -d)
  python3 - "$MODELS_DIR" "$SUB" <<'PY'
import json, os, sys
src, dst = sys.argv[1], sys.argv[2]
m = json.load(open(os.path.join(src, "manifest.json")))
pick = {}
for config in ("tiny", "tiny8", "wide256", "realvocab"):   # head dims 16, 32, 64
    files = m.get(config, {})
    for outtype in ("q2_0", "iq2_xs", "f32"):
        if outtype in files and os.path.exists(os.path.join(src, files[outtype])):
            pick[config] = {outtype: os.path.abspath(os.path.join(src, files[outtype]))}
            break
    if len(pick) == 3:
        break
for config, files in pick.items():
    for outtype, path in files.items():
        os.symlink(path, os.path.join(dst, os.path.basename(path)))
        files[outtype] = os.path.basename(path)
json.dump(pick, open(os.path.join(dst, "manifest.json"), "w"))
print("models:", ", ".join(f"{c}/{t}" for c, f in pick.items() for t in f))
PY
  PYTHONUNBUFFERED=1 timeout 60 python3 tests/gpu/parity.py --strata "$BIN/strata" --models "$SUB" \
      --out "$OUT/gdn_parity.json" > "$OUT/gdn_parity.log" 2>&1 || rc=1
  tail -8 "$OUT/gdn_parity.log"
  rm -rf "$SUB"
else
  echo "skipped: $MODELS_DIR/manifest.json is missing (python3 tests/gpu/prepare_models.py)"
fi

PROMPT=$(python3 -c "print(','.join(str(100 + 37 * i % 400) for i in range(32)))")
if [ -f "$MODEL" ]; then
  echo "== 3. decode on $(basename "$MODEL"), STRATA_CUDA_FUSED_GDN=0/1"
  for f in 0 1; do
    STRATA_CUDA_FUSED_GDN=$f timeout 60 "$BIN/strata" generate --backend cuda --model "$MODEL" --prompt-ids "$PROMPT" \
        -n 128 --ignore-eos --ctx 512 > "$OUT/gdn_decode_$f.tokens" 2> "$OUT/gdn_decode_$f.log"
    echo "rc $?" >> "$OUT/gdn_decode_$f.log"
    echo "fused $f: $(grep -E 'decode:|rc |error' "$OUT/gdn_decode_$f.log" | tr '\n' ' ')"
  done

  echo "== 4. STRATA_CUDA_PROFILE=1 in strata --serve, 64 tokens"
  serve_profile() {   # NAME FUSED PROMPT_LEN
    STRATA_CUDA_FUSED_GDN=$2 STRATA_CUDA_PROFILE=1 timeout 60 python3 tests/gpu/serve_once.py "$BIN/strata" "$MODEL" "$3" \
        > "$OUT/gdn_profile_$1.out" 2> "$OUT/gdn_profile_$1.log"
    echo "rc $?" >> "$OUT/gdn_profile_$1.log"
    echo "-- $1: $(cat "$OUT/gdn_profile_$1.out")"
    sed -n '/cuda op profile/,/outside decode passes/p' "$OUT/gdn_profile_$1.log" | head -14
  }
  serve_profile short_unfused 0 32
  serve_profile short 1 32
  serve_profile ctx1k 1 1024
else
  echo "steps 3-4 skipped: $MODEL is missing (engine/tools/make_synthetic.py $MODEL --experts q2_0)"
fi

python3 - "$OUT" <<'PY' || rc=1
import json, os, re, sys
out = sys.argv[1]
def read(name):
    p = os.path.join(out, name)
    return open(p).read() if os.path.exists(p) else ""
r = {}
ops = read("gdn_ops.log")
m = re.search(r"cuda_ops_test: (\d+) checks, (\d+) failed", ops)
r["ops"] = {"checks": int(m.group(1)), "failed": int(m.group(2))} if m else None
if os.path.exists(os.path.join(out, "gdn_parity.json")):
    r["parity_log_tail"] = read("gdn_parity.log").strip().splitlines()[-6:]
for f in "01":
    log = read(f"gdn_decode_{f}.log")
    d = re.search(r"decode: (\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s\)", log)
    r[f"decode_fused_{f}"] = float(d.group(3)) if d else None
t0, t1 = read("gdn_decode_0.tokens").strip(), read("gdn_decode_1.tokens").strip()
if t0 and t1:
    a, b = t0.split(","), t1.split(",")
    same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    r["decode_tokens_agreeing_from_start"] = same
for name in ("short_unfused", "short", "ctx1k"):
    log = read(f"gdn_profile_{name}.log")
    head = re.search(r"decode passes: (\d+) ops, ([\d.]+) ms on the GPU", log)
    p = re.search(r"per decode pass \((\d+) passes\): host enqueue ([\d.]+) ms \(in ops ([\d.]+)\), host wait ([\d.]+) ms, "
                  r"GPU busy ([\d.]+) ms, GPU span ([\d.]+) ms, wall ([\d.]+) ms -> (\S+)", log)
    done = re.search(r"DONE (\d+) (\d+) ([\d.]+) ([\d.]+)", read(f"gdn_profile_{name}.out"))
    if head and p:
        passes = int(p.group(1))
        r[f"profile_{name}"] = {"ops_per_pass": round(int(head.group(1)) / passes, 1), "passes": passes,
                                "host_enqueue_ms": float(p.group(2)), "host_in_ops_ms": float(p.group(3)),
                                "host_wait_ms": float(p.group(4)), "gpu_busy_ms": float(p.group(5)),
                                "gpu_span_ms": float(p.group(6)), "wall_ms": float(p.group(7)), "verdict": p.group(8),
                                "decode_tok_s_profiled": round(int(done.group(1)) / float(done.group(4)) * 1000, 1)
                                if done and float(done.group(4)) > 0 else None}
json.dump(r, open(os.path.join(out, "gdn_fused.json"), "w"), indent=1)
print(json.dumps(r, indent=1))
ok = r["ops"] is not None and r["ops"]["failed"] == 0
if os.path.exists(os.path.join(out, "gdn_decode_1.log")):   # the synthetic model ran: runs and profiles must be there
    ok = ok and r["decode_fused_0"] and r["decode_fused_1"] and all(
        f"profile_{n}" in r for n in ("short_unfused", "short", "ctx1k"))
sys.exit(0 if ok else 1)
PY
echo "gdn_fused.sh rc $rc"
exit $rc
