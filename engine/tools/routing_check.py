"""The routing curve a model really routes: runs `strata generate --routing-profile-out` on prompts of many different
tokens (random ids, and a repetitive text-like sequence), then prints each layer's share of the expert calls carried
by its top 32/64/128/171/256 experts next to the target of PERFORMANCE.md §1 (make_synthetic.ROUTING_CURVE).

    python engine/tools/routing_check.py --strata build/engine/strata --model M.gguf [--tokens 1000] [--json OUT]
    python engine/tools/routing_check.py --profile P.txt     (a profile written elsewhere, e.g. by the CUDA path)"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_synthetic import ROUTING_CURVE, routing_curve_of  # noqa: E402

NS = (32, 64, 128, 171, 256)


def load_profile(path: str) -> np.ndarray:
    """counts [layers, experts] of a strata routing profile file."""
    with open(path) as f:
        lines = f.read().split("\n")
    if lines[0].strip() != "strata-routing-profile 1":
        raise ValueError(f"{path}: first line is {lines[0]!r}, not 'strata-routing-profile 1'")
    _, L, _, E = lines[1].split()
    counts = np.array([[float(v) for v in ln.split()] for ln in lines[2:2 + int(L)]])
    if counts.shape != (int(L), int(E)):
        raise ValueError(f"{path}: counts of shape {counts.shape}, header says {L} x {E}")
    return counts


def prompts(n_tokens: int, vocab: int, seed: int) -> dict:
    """{name: token ids}: uniformly random ids, and a text-like sequence (a Zipf-ish pick from a 300-word
    vocabulary with a repeated phrase every few words), both n_tokens long."""
    rng = np.random.default_rng(seed)
    random_ids = rng.integers(0, vocab, n_tokens)
    words = rng.integers(0, vocab, 300)
    zipf = 1.0 / np.arange(1, 301)
    text = words[rng.choice(300, n_tokens, p=zipf / zipf.sum())]
    phrase = words[:6]
    for start in range(0, n_tokens - 6, 40):
        text[start:start + 6] = phrase
    return {"random": random_ids.tolist(), "text-like": text.tolist()}


def profile_of_run(strata: str, model: str, ids: list, threads: int) -> np.ndarray:
    with tempfile.TemporaryDirectory() as d:
        pf, out = os.path.join(d, "ids.txt"), os.path.join(d, "profile.txt")
        with open(pf, "w") as f:
            f.write(",".join(map(str, ids)))
        cmd = [strata, "generate", "--model", model, "--prompt-file", pf, "-n", "1", "--ctx", str(len(ids) + 8),
               "--routing-profile-out", out]
        if threads:
            cmd += ["--threads", str(threads)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:6])} ... failed (rc {r.returncode}): {r.stderr[-2000:]}")
        return load_profile(out)


def summarize(counts: np.ndarray) -> dict:
    """Per-layer curves, their mean, the worst gap to the target (points) and the largest single expert share."""
    per_layer = [routing_curve_of(c) for c in counts]
    target = dict(ROUTING_CURVE)
    mean = {n: float(np.mean([c[n] for c in per_layer])) for n in NS}
    gap = max(abs(c[n] - target[n]) for c in per_layer for n in NS)
    top1 = float(max(c.max() / max(c.sum(), 1) * 10 for c in counts))   # share of the tokens (k = 10)
    return {"per_layer": per_layer, "mean": mean, "max_gap_points": 100 * gap, "max_top1_token_share": top1}


def print_summary(name: str, s: dict) -> None:
    target = dict(ROUTING_CURVE)
    print(f"== {name}: top n experts' share of the calls, per layer (target " +
          "/".join(f"{100 * target[n]:.0f}" for n in NS) + f" for n = {'/'.join(map(str, NS))})")
    for i, c in enumerate(s["per_layer"]):
        print(f"  layer {i:2d}: " + " ".join(f"{100 * c[n]:5.1f}" for n in NS))
    print("  mean    : " + " ".join(f"{100 * s['mean'][n]:5.1f}" for n in NS))
    print(f"  worst gap to target {s['max_gap_points']:.1f} points; most chosen expert is picked by "
          f"{100 * s['max_top1_token_share']:.0f}% of the tokens")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strata")
    ap.add_argument("--model")
    ap.add_argument("--profile", help="summarize this routing profile file instead of running the engine")
    ap.add_argument("--tokens", type=int, default=1000)
    ap.add_argument("--vocab", type=int, default=248000)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the summaries here")
    a = ap.parse_args(argv)
    results = {}
    if a.profile:
        results["profile"] = summarize(load_profile(a.profile))
    else:
        if not (a.strata and a.model):
            ap.error("give --strata and --model, or --profile")
        for name, ids in prompts(a.tokens, a.vocab, a.seed).items():
            results[name] = summarize(profile_of_run(a.strata, a.model, ids, a.threads))
    for name, s in results.items():
        print_summary(name, s)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
