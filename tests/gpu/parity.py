"""GPU-vs-CPU parity of whole models: for every GGUF in a models folder (manifest.json: {config: {outtype: file}}),
runs `strata generate` with --backend cpu and --backend cuda for N greedy tokens after a fixed prompt and compares
the tokens and the logits of every step (max|cuda - cpu| / max|cpu|), in two activation modes:
  f32act  both backends with --f32-activations (block weights times f32 activations): the pass/fail check, tokens
          identical and logits within --tol;
  q8act   the default, activations quantized to Q8_0/Q8_K on both backends as the CPU path does: recorded, not
          gated, since a last-bit difference upstream can move an activation across a rounding step of the
          quantizer and random tiny models amplify such steps.
Needs only the standard library and numpy (the GPU machine's image has both).

usage: parity.py --strata BIN --models DIR --out results.json [--tokens 64] [--tol 1e-3]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

# Both backends' KV format: f32, or STRATA_KV's (the round step `kv`), whatever the engine's default is.
KV = os.environ.get("STRATA_KV") or "f32"
PROMPT = [(i * 37 + 11) % 470 + 1 for i in range(40)]   # ids valid in the small and the real vocabulary


MODES = {"f32act": ["--f32-activations"], "q8act": []}


def run_generate(strata: str, model: str, backend: str, mode: str, n: int, logits_path: str) -> dict:
    cmd = [strata, "generate", "--model", model, "--backend", backend, "--prompt-ids", ",".join(map(str, PROMPT)),
           "-n", str(n), "--ignore-eos", "--logits-out", logits_path, "--kv", KV] + MODES[mode]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    wall = time.time() - t0
    if p.returncode != 0:
        return {"ok": False, "error": p.stderr.strip()[-2000:], "wall_s": round(wall, 2)}
    tokens = [int(t) for t in p.stdout.strip().splitlines()[-1].split(",") if t]
    m = re.search(r"decode: \d+ tokens in [\d.]+ s \(([\d.]+) tok/s\)", p.stderr)
    return {"ok": True, "tokens": tokens, "decode_tok_s": float(m.group(1)) if m else None, "wall_s": round(wall, 2)}


def compare(cpu: dict, gpu: dict, cpu_logits: np.ndarray, gpu_logits: np.ndarray, tol: float) -> dict:
    n = min(len(cpu["tokens"]), len(gpu["tokens"]))
    first_diff = next((i for i in range(n) if cpu["tokens"][i] != gpu["tokens"][i]), None)
    if len(cpu["tokens"]) != len(gpu["tokens"]) and first_diff is None:
        first_diff = n
    # Logits of step i are comparable while the inputs agree: steps 0 … first_diff (inclusive).
    last = n - 1 if first_diff is None else min(first_diff, n - 1)
    rels = []
    for i in range(last + 1):
        c, g = cpu_logits[i], gpu_logits[i]
        rels.append(float(np.max(np.abs(g - c)) / max(float(np.max(np.abs(c))), 1e-30)))
    max_rel = max(rels) if rels else float("nan")
    ok = first_diff is None and bool(np.isfinite(max_rel)) and max_rel <= tol
    return {"tokens_identical": first_diff is None, "first_token_diff": first_diff, "steps": n,
            "max_rel_logit_diff": max_rel, "rel_per_step": [float(f"{r:.3g}") for r in rels], "ok": ok}


def model_args(doc: str) -> argparse.ArgumentParser:
    """The arguments every parity script of this folder takes: the binary, the models folder, the output, N, tol."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--strata", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--tol", type=float, default=1e-3)
    return ap


def manifest_of(models: str) -> dict:
    with open(os.path.join(models, "manifest.json")) as f:
        return json.load(f)


def main(argv=None) -> int:
    args = model_args(__doc__).parse_args(argv)
    manifest = manifest_of(args.models)
    results = []
    tmp = tempfile.mkdtemp(prefix="parity-")
    for config, files in manifest.items():
        for outtype, fn in files.items():
            for mode in MODES:
                entry = {"config": config, "outtype": outtype, "mode": mode, "file": fn}
                entry.update(check_model(args, os.path.join(args.models, fn), mode, tmp))
                results.append(entry)
                status = ("ok" if entry.get("ok") else "FAIL") if mode == "f32act" else "(recorded)"
                print(f"{config:10s} {outtype:7s} {mode}: tokens {'identical' if entry.get('tokens_identical') else 'DIFFER'}"
                      f" (first diff {entry.get('first_token_diff')}), max rel logit diff "
                      f"{entry.get('max_rel_logit_diff', float('nan')):.2e}, cpu {entry['cpu'].get('decode_tok_s')} tok/s,"
                      f" cuda {entry['cuda'].get('decode_tok_s')} tok/s  {status}", flush=True)
                for b in ("cpu", "cuda"):
                    if not entry[b]["ok"]:
                        print(f"  {b} error: {entry[b]['error']}", flush=True)
    gated = [r for r in results if r["mode"] == "f32act"]
    q8 = [r for r in results if r["mode"] == "q8act"]
    summary = {"prompt": PROMPT, "tokens": args.tokens, "tol": args.tol, "models": len(gated),
               "passed": sum(1 for r in gated if r.get("ok")),
               "q8act_tokens_identical": sum(1 for r in q8 if r.get("tokens_identical")), "results": results}
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=1)
    print(f"parity (f32 activations): {summary['passed']}/{summary['models']} models pass (tokens identical, logits "
          f"within {args.tol}); Q8 activations: tokens identical on {summary['q8act_tokens_identical']}/{len(q8)}")
    return 0 if summary["passed"] == summary["models"] else 1


def check_model(args, model: str, mode: str, tmp: str) -> dict:
    runs, entry = {}, {}
    for backend in ("cpu", "cuda"):
        path = os.path.join(tmp, f"{backend}.f32")
        runs[backend] = run_generate(args.strata, model, backend, mode, args.tokens, path)
        runs[backend]["logits_path"] = path
    entry["cpu"] = {k: v for k, v in runs["cpu"].items() if k not in ("tokens", "logits_path")}
    entry["cuda"] = {k: v for k, v in runs["cuda"].items() if k not in ("tokens", "logits_path")}
    if runs["cpu"]["ok"] and runs["cuda"]["ok"]:
        cl = np.fromfile(runs["cpu"]["logits_path"], dtype=np.float32)
        gl = np.fromfile(runs["cuda"]["logits_path"], dtype=np.float32)
        steps = len(runs["cpu"]["tokens"])
        vocab = cl.size // max(steps, 1)
        if cl.size != gl.size or vocab * steps != cl.size:
            entry.update(ok=False, error=f"logit files differ in size: cpu {cl.size}, cuda {gl.size} floats")
        else:
            entry.update(compare(runs["cpu"], runs["cuda"], cl.reshape(steps, vocab), gl.reshape(steps, vocab), args.tol))
            entry["vocab"] = vocab
            entry["cpu_tokens_head"] = runs["cpu"]["tokens"][:12]
    else:
        entry["ok"] = False
    for r in runs.values():
        if os.path.exists(r["logits_path"]):
            os.remove(r["logits_path"])
    return entry


if __name__ == "__main__":
    sys.exit(main())
