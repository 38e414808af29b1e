"""Programmatic dependent launches change when a kernel's blocks are scheduled, never what they compute
(engine/src/backend/cuda/kernels/launch.cuh). So for every model: `strata generate` with STRATA_CUDA_PDL=0, with
STRATA_CUDA_PDL=1 and with STRATA_CUDA_PDL=1 again must give the same tokens and bit-identical logits at every step.
A kernel that reads before its pdl_entry() shows up here as a difference (or as a run that does not repeat).
Cases: every model of the manifest on the GPU alone, the first tiny one also with a frozen 30% expert cache (the
hybrid path: CPU misses joined on the device, a fixed zero-copy share so that the same pairs go to the CPU in every
run), and optionally a big model (--big, e.g. the synthetic one) alone and as the 12 GB PC stand-in.

usage: pdl_check.py --strata BIN --models DIR --out results.json [--tokens 32] [--big SYN.gguf]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parity import PROMPT, manifest_of  # noqa: E402

RUNS = [("pdl0", "0"), ("pdl1", "1"), ("pdl1_again", "1")]


HYBRID_ENV = {"STRATA_GPU_MISS_SHARE": "0.5"}   # a fixed share: the auto share is tuned from timings


def generate(strata: str, model: str, n: int, pdl: str, extra: list[str], logits: str) -> dict:
    env = dict(os.environ, STRATA_CUDA_PDL=pdl, **(HYBRID_ENV if "--expert-cache" in extra else {}))
    cmd = [strata, "generate", "--model", model, "--backend", "cuda", "--prompt-ids", ",".join(map(str, PROMPT)),
           "-n", str(n), "--ignore-eos", "--logits-out", logits] + extra
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    if p.returncode != 0:
        return {"ok": False, "error": p.stderr.strip()[-1500:]}
    return {"ok": True, "tokens": [int(t) for t in p.stdout.strip().splitlines()[-1].split(",") if t],
            "decode": next((l for l in p.stderr.splitlines() if "decode:" in l), "")}


def check(strata: str, model: str, n: int, extra: list[str], tmp: str) -> dict:
    runs, logits = {}, {}
    for name, pdl in RUNS:
        path = os.path.join(tmp, f"{name}.f32")
        runs[name] = generate(strata, model, n, pdl, extra, path)
        if runs[name]["ok"]:
            logits[name] = np.fromfile(path, dtype=np.float32)
            os.remove(path)
    entry = {"model": os.path.basename(model), "flags": extra,
             "decode": {k: r.get("decode", r.get("error", "")) for k, r in runs.items()}}
    if not all(r["ok"] for r in runs.values()):
        entry.update(ok=False, errors={k: r["error"] for k, r in runs.items() if not r["ok"]})
        return entry
    base = "pdl0"
    for name in ("pdl1", "pdl1_again"):
        same_tokens = runs[name]["tokens"] == runs[base]["tokens"]
        same_logits = logits[name].shape == logits[base].shape and bool(np.array_equal(logits[name], logits[base]))
        diff = float(np.max(np.abs(logits[name] - logits[base]))) if logits[name].shape == logits[base].shape else None
        entry[name] = {"tokens_identical": same_tokens, "logits_bit_identical": same_logits, "max_abs_diff": diff}
    entry["ok"] = all(entry[k]["tokens_identical"] and entry[k]["logits_bit_identical"] for k in ("pdl1", "pdl1_again"))
    return entry


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strata", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--big", default="", help="one more model (the synthetic full-size one), GPU alone and pc12")
    a = ap.parse_args(argv)
    cases = []
    manifest = manifest_of(a.models)
    first_tiny = None
    for config, files in manifest.items():
        for outtype, fn in files.items():
            path = os.path.join(a.models, fn)
            cases.append((path, []))
            if first_tiny is None and config == "tiny" and outtype in ("q2_0", "iq2_xs"):
                first_tiny = path
    frozen = ["--expert-adapt", "0", "--cpu-workers", "4"]
    if first_tiny:   # the hybrid path: 10 of tiny's 32 experts (4 layers x 8) cached, CPU misses
        cases.append((first_tiny, ["--expert-cache", "10-slots"] + frozen))
    if a.big:
        cases.append((a.big, []))
        cases.append((a.big, ["--expert-cache", "4100-slots"] + frozen))
    tmp = tempfile.mkdtemp(prefix="pdl-")
    results = []
    for model, extra in cases:
        r = check(a.strata, model, a.tokens, extra, tmp)
        results.append(r)
        print(f"{r['model']:28s} {' '.join(extra):60s} {'ok' if r['ok'] else 'FAIL'} "
              f"{ {k: r[k] for k in ('pdl1', 'pdl1_again') if k in r} or r.get('errors')}", flush=True)
    passed = sum(1 for r in results if r["ok"])
    with open(a.out, "w") as f:
        json.dump({"tokens": a.tokens, "passed": passed, "cases": len(results), "results": results}, f, indent=1)
    print(f"pdl_check: {passed}/{len(results)} cases bit-identical with and without programmatic dependent launches")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
