#!/usr/bin/env bash
# Decode A/B of two engine builds (e.g. the session's base commit against its head, to tell a change's cost from the
# run-to-run spread): bench/decode.py at one context with the gpu setting (and pc12 when SETTINGS says so), the two
# binaries interleaved REPEAT times (default 2). Writes $OUT/ab_binaries.json: each run's decode tok/s, pass ms and
# PLE wait a pass, per binary, and each side's mean pass less its PLE wait.
# usage: [REPEAT=n] [SETTINGS=gpu] [CONTEXT=1024] tests/gpu/ab_binaries.sh A_STRATA B_STRATA [MODEL.gguf]
set -u -o pipefail
cd "$(dirname "$0")/../.."
A=$1
B=$2
MODEL=${3:-/tmp/syn-q2_0.gguf}
OUT=${OUT:-tests/gpu/results/latest}
mkdir -p "$OUT"
for run in $(seq 1 "${REPEAT:-2}"); do
  for side in a b; do
    bin=$A
    [ "$side" = b ] && bin=$B
    python3 bench/decode.py --strata "$bin" --model "$MODEL" --out "$OUT/ab_${side}_$run" --contexts "${CONTEXT:-1024}" \
        --warm 128 --decode 64 --settings "${SETTINGS:-gpu}" --budget-s 120 > "$OUT/ab_${side}_$run.txt" 2>&1
    echo "== $side ($run): $(grep -E 'tok/s' "$OUT/ab_${side}_$run.txt" | tr '\n' ' ')"
  done
done
python3 - "$OUT" "${REPEAT:-2}" "$A" "$B" <<'PY'
import json, sys
out, repeat, a, b = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
res = {"a": a, "b": b, "runs": []}
for run in range(1, repeat + 1):
    for side in "ab":
        d = json.load(open(f"{out}/ab_{side}_{run}/decode.json"))
        for name, s in d["settings"].items():
            for ctx, r in s.get("contexts", {}).items():
                res["runs"].append({"side": side, "run": run, "setting": name, "context": int(ctx),
                                    "decode_tok_s": r.get("decode_tok_s"), "pass_ms": r.get("pass_ms"),
                                    "ple_wait_ms": (r.get("ple") or {}).get("wait_ms_per_pass")})
# The PLE rows come from the device's disk, whose latency moves tok/s between runs of one binary: compare the pass
# less its PLE wait too.
for r in res["runs"]:
    if r["pass_ms"] is not None and r["ple_wait_ms"] is not None:
        r["pass_less_ple_ms"] = round(r["pass_ms"] - r["ple_wait_ms"], 3)
summary = {}
for r in res["runs"]:
    if "pass_less_ple_ms" in r:
        summary.setdefault(f"{r['setting']} {r['context']} {r['side']}", []).append(r["pass_less_ple_ms"])
res["mean_pass_less_ple_ms"] = {k: round(sum(v) / len(v), 3) for k, v in summary.items()}
json.dump(res, open(f"{out}/ab_binaries.json", "w"), indent=1)
for r in res["runs"]:
    print(r)
for k, v in res["mean_pass_less_ple_ms"].items():
    print(f"mean pass less PLE wait, {k}: {v} ms")
PY
