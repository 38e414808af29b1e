#!/usr/bin/env bash
# The hybrid expert path on the synthetic full-size model (engine/tools/make_synthetic.py, Q2_0 experts, 48 layers x
# 512 experts), on a machine with a GPU, as a stand-in for a 12 GB PC: 6 CPU workers, a few thousand slots.
#   run A: 4,100 slots filled by expert id, frozen; writes a routing profile of what it routed;
#   run B: 8,200 slots filled from that profile, frozen.
# A and B must give the same greedy tokens (the cache changes only where experts are computed, GPU or CPU; with Q8
# activations the two compute an expert to within rounding, so a near-tie could still part them). Each run's
# decode tok/s, hit rate and CPU share go to $OUT/synthetic_cache.json with the engine's log lines.
# Needs the gguf package (the device image lacks it: carry .whl/gguf-*.whl) and ~40 GB of disk.
# usage: tests/gpu/synthetic_cache.sh BUILD_DIR
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-tests/gpu/results/latest}
BIN=${1:-build-gpu}/engine/strata
MODEL=${SYN_MODEL:-/tmp/syn-q2_0.gguf}
mkdir -p "$OUT"
python3 -c "import gguf" 2>/dev/null || {
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/gguf-*.whl && export PYTHONPATH=/tmp/site; }
[ -f "$MODEL" ] || timeout 120 python3 engine/tools/make_synthetic.py "$MODEL" --experts q2_0 --workers "$(nproc)" || exit 1
PROMPT=$(python3 -c "print(','.join(str(100 + 37 * i) for i in range(32)))")
PROFILE=/tmp/syn.profile
run() {  # name, then extra flags
  local name=$1; shift
  echo "== $name: $*"
  timeout 120 "$BIN" generate --backend cuda --model "$MODEL" --prompt-ids "$PROMPT" -n 48 --ignore-eos --ctx 128 \
      --cpu-workers 6 "$@" > "$OUT/syn_$name.tokens" 2> "$OUT/syn_$name.log"
  echo "rc $?" >> "$OUT/syn_$name.log"
  grep -E "expert cache|prompt:|decode split|rc " "$OUT/syn_$name.log"
}
run A --expert-cache 4100-slots --expert-adapt 0 --routing-profile-out "$PROFILE"
run B --expert-cache 8200-slots --expert-adapt 0 --routing-profile "$PROFILE"
python3 - "$OUT" <<'EOF'
import json, re, sys
out = sys.argv[1]
runs = {}
for name in "AB":
    log = open(f"{out}/syn_{name}.log").read()
    toks = open(f"{out}/syn_{name}.tokens").read().strip()
    r = {"tokens": toks.splitlines()[-1] if toks else ""}
    m = re.search(r"expert cache: (\d+) slots of (\d+) experts; hits (\d+) of (\d+) look-ups.*?moves (\d+) done.*?CPU (\d+) "
                  r"expert pairs in (\d+) ms", log)
    if m:
        s, e, h, l, mv, cp, cms = map(int, m.groups())
        r.update(slots=s, experts=e, hit_rate=round(h / max(l, 1), 4), moves=mv, cpu_pairs=cp, cpu_ms=cms)
    d = re.search(r"prompt: (\d+) tokens in ([\d.]+) s .*decode: (\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s\)", log)
    if d:
        r.update(prompt_s=float(d.group(2)), decode_tokens=int(d.group(3)), decode_s=float(d.group(4)),
                 decode_tok_s=float(d.group(5)))
    sp = re.search(r"decode split: hits (\d+) of (\d+); CPU ([\d.]+) ms for (\d+) pairs, ([\d.]+) MB of experts read "
                   r"\(([\d.]+) GB/s\); GPU waited ([\d.]+) ms for the CPU", log)
    if sp:
        r["decode_split"] = dict(zip(["hits", "lookups", "cpu_ms", "cpu_pairs", "cpu_mb", "cpu_gb_s", "gpu_wait_ms"],
                                     map(float, sp.groups())))
    p = re.search(r"pinned in (\d+) ms", log)
    r["pin_ms"] = int(p.group(1)) if p else None
    runs[name] = r
same = bool(runs["A"]["tokens"]) and runs["A"]["tokens"] == runs["B"]["tokens"]
first = None
if not same and runs["A"]["tokens"] and runs["B"]["tokens"]:
    b, c = runs["A"]["tokens"].split(","), runs["B"]["tokens"].split(",")
    first = next((i for i in range(min(len(b), len(c))) if b[i] != c[i]), min(len(b), len(c)))
res = {"frozen_sizes_tokens_identical": same, "first_diff": first, "runs": runs}
json.dump(res, open(f"{out}/synthetic_cache.json", "w"), indent=1)
print(json.dumps({k: v for k, v in res.items() if k != "runs"}), {n: {k: v for k, v in r.items() if k != "tokens"} for n, r in runs.items()})
sys.exit(0 if same else 1)
EOF
