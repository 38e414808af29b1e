#!/usr/bin/env bash
# The T = 1 kernels of hyper_read / route_topk / rms_norm in a real decode (issue #7, setting (a)), ~70-90 s:
#   1. strata generate on the synthetic model, 128 tokens, with the replaced kernels (old: STRATA_CUDA_HYPER_READ=v1
#      STRATA_CUDA_ROUTE_TOPK=v1 STRATA_CUDA_RMS_NORM=v1), with the current ones (new) and with the current ones and
#      the decode kernels as programmatic dependent launches (pdl: STRATA_CUDA_PDL=1): tok/s, tokens agreeing
#   2. STRATA_CUDA_PROFILE=1 tables from strata --serve, 64 tokens after a 1024-token prompt, the three settings
# Writes $OUT/t1_ops_decode.json and the logs; prints a short summary.
# usage: bash tests/gpu/t1_ops_decode.sh BUILD_DIR [SYN_MODEL]   (default /tmp/syn-q2_0.gguf)
set -u
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
MODEL=${2:-/tmp/syn-q2_0.gguf}
OUT=${OUT:-tests/gpu/results/latest}
BIN=$BUILD/engine
mkdir -p "$OUT"
rm -f "$OUT"/t1_decode_* "$OUT"/t1_profile_* "$OUT"/t1_ops_decode.json
[ -f "$MODEL" ] || { echo "t1_ops_decode.sh: $MODEL is missing (engine/tools/make_synthetic.py $MODEL --experts q2_0)"; exit 1; }
settings() {   # the environment of a setting
  case $1 in
    old) echo "STRATA_CUDA_HYPER_READ=v1 STRATA_CUDA_ROUTE_TOPK=v1 STRATA_CUDA_RMS_NORM=v1" ;;
    pdl) echo "STRATA_CUDA_PDL=1" ;;
    *) echo "STRATA_T1=new" ;;
  esac
}
rc=0

echo "== 1. decode on $(basename "$MODEL"): replaced kernels (old), current (new), current with PDL (pdl)"
PROMPT=$(python3 -c "print(','.join(str(100 + 37 * i % 400) for i in range(32)))")
for v in old new pdl; do
  env $(settings $v) timeout 60 "$BIN/strata" generate --backend cuda --model "$MODEL" --prompt-ids "$PROMPT" \
      -n 128 --ignore-eos --ctx 512 > "$OUT/t1_decode_$v.tokens" 2> "$OUT/t1_decode_$v.log"
  echo "rc $?" >> "$OUT/t1_decode_$v.log"
  echo "$v: $(grep -E 'decode:|rc |error' "$OUT/t1_decode_$v.log" | tr '\n' ' ')"
done

echo "== 2. STRATA_CUDA_PROFILE=1 in strata --serve, 64 tokens after 1024"
for v in old new pdl; do
  env $(settings $v) STRATA_CUDA_PROFILE=1 timeout 60 python3 tests/gpu/serve_once.py "$BIN/strata" "$MODEL" 1024 \
      > "$OUT/t1_profile_$v.out" 2> "$OUT/t1_profile_$v.log"
  echo "rc $?" >> "$OUT/t1_profile_$v.log"
  echo "-- $v: $(cat "$OUT/t1_profile_$v.out")"
  grep -E "^  (op |hyper_read|route_topk|rms_norm|hyper_inject)|per decode pass" "$OUT/t1_profile_$v.log"
done

python3 - "$OUT" <<'PY' || rc=1
import json, os, re, sys
out = sys.argv[1]
def read(name):
    p = os.path.join(out, name)
    return open(p).read() if os.path.exists(p) else ""
r = {}
for v in ("old", "new", "pdl"):
    d = re.search(r"decode: (\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s\)", read(f"t1_decode_{v}.log"))
    r[f"decode_tok_s_{v}"] = float(d.group(3)) if d else None
    log = read(f"t1_profile_{v}.log")
    ops = {}
    for m in re.finditer(r"^  (hyper_read|route_topk|rms_norm|hyper_inject)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)%",
                         log, re.M):
        ops[m.group(1)] = {"calls": int(m.group(2)), "gpu_ms": float(m.group(3)), "us_per_call": float(m.group(4)),
                           "share_pct": float(m.group(5))}
    p = re.search(r"per decode pass \((\d+) passes\):.*GPU busy ([\d.]+) ms, GPU span ([\d.]+) ms, wall ([\d.]+) ms", log)
    r[f"profile_{v}"] = {"ops": ops, "gpu_busy_ms": float(p.group(2)) if p else None,
                         "gpu_span_ms": float(p.group(3)) if p else None, "wall_ms": float(p.group(4)) if p else None}
def agree(x, y):
    a, b = read(f"t1_decode_{x}.tokens").strip().split(","), read(f"t1_decode_{y}.tokens").strip().split(",")
    return next((i for i, (p, q) in enumerate(zip(a, b)) if p != q), min(len(a), len(b)))
r["tokens_old_new_agreeing_from_start"] = agree("old", "new")
r["tokens_new_pdl_identical"] = read("t1_decode_new.tokens") == read("t1_decode_pdl.tokens")
json.dump(r, open(os.path.join(out, "t1_ops_decode.json"), "w"), indent=1)
print(json.dumps(r, indent=1))
sys.exit(0 if r["decode_tok_s_new"] and r["profile_new"]["ops"] and r["tokens_new_pdl_identical"] else 1)
PY
echo "t1_ops_decode.sh rc $rc"
exit $rc
