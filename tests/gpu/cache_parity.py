"""Expert-cache parity (issue #7): for every model of a models folder, `strata generate --backend cuda` with an expert
cache holding 0%, ~30% and 100% of the routed experts (the rest computed by the CPU pool from pinned host memory;
adaptation on: --expert-adapt 2 plans moves every 2 passes of a layer) against the CPU path, both with
--f32-activations: the greedy tokens must be identical and the logits within --tol (max |cuda - cpu| / max |cpu| per
step), over the prompt and 64 tokens of parity.py. Each run's cache summary must fit its size: 0% no hits, 100% only
hits, 30% both; and over all models, experts must have moved at 30%. Last, a routing profile round trip on the first
model: the 30% run writes --routing-profile-out, a frozen 30% run filled from it must give the same tokens.

usage: cache_parity.py --strata BIN --models DIR --out results.json [--tokens 64] [--tol 1e-3]
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parity import KV, PROMPT, compare, manifest_of, model_args  # noqa: E402

SUMMARY = re.compile(r"expert cache: (\d+) slots of (\d+) experts; hits (\d+) of (\d+) look-ups \([\d.]+%\); moves (\d+) "
                     r"done, (\d+) in flight; CPU (\d+) expert pairs in (\d+) ms on (\d+) workers")
SHARES = {"0%": 0.0, "30%": 0.3, "100%": 1.0}


def run(strata: str, model: str, backend: str, n: int, logits: str, extra: list[str]) -> dict:
    cmd = [strata, "generate", "--model", model, "--backend", backend, "--prompt-ids", ",".join(map(str, PROMPT)),
           "-n", str(n), "--ignore-eos", "--logits-out", logits, "--f32-activations", "--kv", KV] + extra
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = {"ok": p.returncode == 0, "wall_s": round(time.time() - t0, 2), "args": extra}
    if p.returncode != 0:
        out["error"] = p.stderr.strip()[-2000:]
        return out
    out["tokens"] = [int(t) for t in p.stdout.strip().splitlines()[-1].split(",") if t]
    m = SUMMARY.search(p.stderr)
    if m:
        keys = ["slots", "experts", "hits", "lookups", "moves", "in_flight", "cpu_pairs", "cpu_ms", "workers"]
        out["cache"] = dict(zip(keys, map(int, m.groups())))
    d = re.search(r"decode: \d+ tokens in [\d.]+ s \(([\d.]+) tok/s\)", p.stderr)
    out["decode_tok_s"] = float(d.group(1)) if d else None
    return out


def logits_of(path: str, steps: int) -> np.ndarray:
    a = np.fromfile(path, dtype=np.float32)
    return a.reshape(steps, a.size // steps)


def size_fits(share: str, c: dict | None) -> bool:
    if not c:
        return False
    if share == "0%":
        return c["hits"] == 0 and c["lookups"] > 0 and c["slots"] == 0
    if share == "100%":
        return c["hits"] == c["lookups"] > 0 and c["slots"] == c["experts"]
    return 0 < c["hits"] < c["lookups"] and 0 < c["slots"] < c["experts"]


def check_model(args, path: str, tmp: str) -> list[dict]:
    cpu_logits = os.path.join(tmp, "cpu.f32")
    cpu = run(args.strata, path, "cpu", args.tokens, cpu_logits, [])
    if not cpu["ok"]:
        return [{"share": s, "ok": False, "error": "cpu: " + cpu["error"]} for s in SHARES]
    cl = logits_of(cpu_logits, len(cpu["tokens"]))
    rows, experts = [], None
    for share, frac in SHARES.items():
        gpu_logits = os.path.join(tmp, "gpu.f32")
        slots = 0 if experts is None else int(round(frac * experts))
        extra = ["--expert-cache", f"{slots}-slots", "--expert-adapt", "2", "--cpu-workers", str(args.cpu_workers)]
        gpu = run(args.strata, path, "cuda", args.tokens, gpu_logits, extra)
        row = {"share": share, "slots": slots, "cuda": {k: v for k, v in gpu.items() if k != "tokens"},
               "cpu_decode_tok_s": cpu["decode_tok_s"]}
        if gpu["ok"]:
            experts = experts or (gpu.get("cache") or {}).get("experts")
            gl = logits_of(gpu_logits, len(gpu["tokens"]))
            if gl.shape != cl.shape:
                row.update(ok=False, error=f"logit shapes differ: cpu {cl.shape}, cuda {gl.shape}")
            else:
                row.update(compare(cpu, gpu, cl, gl, args.tol))
                row["size_fits"] = size_fits(share, gpu.get("cache"))
                row["ok"] = row["ok"] and row["size_fits"]
        else:
            row["ok"] = False
        rows.append(row)
    return rows


def profile_round_trip(args, path: str, tmp: str, experts: int) -> dict:
    slots = int(round(0.3 * experts))
    runs = {}
    for name, extra in (("writes", ["--routing-profile-out", args.profile_out]),
                        ("reads", ["--routing-profile", args.profile_out, "--expert-adapt", "0"])):
        if name == "reads" and not os.path.exists(args.profile_out):
            return {"ok": False, "error": "no profile was written"}
        runs[name] = run(args.strata, path, "cuda", args.tokens, os.path.join(tmp, f"p-{name}.f32"),
                         ["--expert-cache", f"{slots}-slots", "--cpu-workers", str(args.cpu_workers)] + extra)
        if not runs[name]["ok"]:
            return {"ok": False, "error": f"{name}: " + runs[name]["error"]}
    same = runs["writes"]["tokens"] == runs["reads"]["tokens"]
    return {"ok": same, "tokens_identical": same, "slots": slots,
            "cache_written_run": runs["writes"].get("cache"), "cache_profile_run": runs["reads"].get("cache")}


def main(argv=None) -> int:
    ap = model_args(__doc__)
    ap.add_argument("--cpu-workers", type=int, default=4)
    args = ap.parse_args(argv)
    manifest = manifest_of(args.models)
    tmp = tempfile.mkdtemp(prefix="cache-parity-")
    results = []
    for config, files in manifest.items():
        for outtype, fn in files.items():
            for row in check_model(args, os.path.join(args.models, fn), tmp):
                row.update(config=config, outtype=outtype, file=fn)
                results.append(row)
                c = row.get("cuda", {}).get("cache") or {}
                print(f"{config:10s} {outtype:7s} cache {row['share']:>4s} ({row.get('slots')} slots): tokens "
                      f"{'identical' if row.get('tokens_identical') else 'DIFFER'} (first diff "
                      f"{row.get('first_token_diff')}), max rel logit diff {row.get('max_rel_logit_diff', float('nan')):.2e}, "
                      f"hits {c.get('hits')}/{c.get('lookups')}, moves {c.get('moves')}, cpu pairs {c.get('cpu_pairs')}"
                      f"  {'ok' if row.get('ok') else 'FAIL'}", flush=True)
                if row.get("error") or row.get("cuda", {}).get("error"):
                    print("  error:", row.get("error") or row["cuda"]["error"], flush=True)
    moves_30 = sum(((r.get("cuda") or {}).get("cache") or {}).get("moves", 0) for r in results if r["share"] == "30%")
    first = next(iter(manifest.values()))
    first_file = os.path.join(args.models, next(iter(first.values())))
    experts = next((r["cuda"]["cache"]["experts"] for r in results if (r.get("cuda") or {}).get("cache")), 0)
    args.profile_out = os.path.join(tmp, "routing.profile")
    profile = profile_round_trip(args, first_file, tmp, experts) if experts else {"ok": False, "error": "no run"}
    print(f"routing profile round trip ({first_file}): {'ok' if profile['ok'] else 'FAIL'} {profile}", flush=True)
    passed = sum(1 for r in results if r.get("ok"))
    summary = {"prompt": PROMPT, "tokens": args.tokens, "tol": args.tol, "runs": len(results), "passed": passed,
               "moves_at_30pct": moves_30, "profile_round_trip": profile, "results": results}
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=1)
    ok = passed == len(results) and moves_30 > 0 and profile["ok"]
    print(f"cache parity (f32 activations): {passed}/{len(results)} runs pass (tokens identical, logits within "
          f"{args.tol}, hits fit the size); experts moved at 30%: {moves_30}; profile round trip "
          f"{'ok' if profile['ok'] else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
