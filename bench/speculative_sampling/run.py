"""Speculation for sampling requests (generate/draft_rule.h) on the demo model with its MTP head, CPU, through the
serve protocol: for greedy and several temperatures (Qwen's recommended top_p 0.95 / top_k 20 with them), over the
same chat prompts as bench/draft_min_p and a few seeds, the drafts offered and accepted and the tokens each verify
pass yields (generated / (generated − accepted)), which is what a GPU pass turns into speed (a CPU pass of the demo
costs about as much a token verified or not, bench/results/2026-12-01-vm-draft-min-p). Before this change a request
with a temperature decoded one token a pass (1.00 token a pass).

usage: python3 bench/speculative_sampling/run.py --out DIR [--strata build/engine/strata] [--seeds 4]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "draft_min_p"))
from run import DEMO, MTP, QUESTIONS, REPO, prompt_ids  # noqa: E402

SETTINGS = [("greedy", ""), ("temperature 0.6", "temperature=0.6 top_p=0.95 top_k=20"),
            ("temperature 1.0", "temperature=1.0 top_p=0.95 top_k=20"), ("temperature 1.0, no top-p/top-k",
                                                                        "temperature=1.0")]


def serve(strata: str, lines: list[str]) -> list[list[str]]:
    p = subprocess.run([strata, "--serve", "--model", DEMO, "--mtp", MTP, "--threads", "1"], input="".join(lines),
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-800:]
    return [line.split() for line in p.stdout.splitlines() if line.startswith("DONE")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strata", default=os.path.join(REPO, "build", "engine", "strata"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seeds", type=int, default=4)
    a = ap.parse_args(argv)
    prompts = [",".join(map(str, prompt_ids(q))) for q in QUESTIONS]
    rows = []
    for name, keys in SETTINGS:
        seeds = [None] if not keys else range(a.seeds)
        lines = [f"GEN 400 {keys}{'' if s is None else f' seed={s}'} {p}\n".replace("  ", " ")
                 for s in seeds for p in prompts]
        done = serve(a.strata, lines)
        gen = sum(int(d[1]) for d in done)
        acc = sum(int(d[6]) for d in done)
        off = sum(int(d[7]) for d in done)
        rows.append({"setting": name, "keys": keys, "requests": len(done), "generated": gen, "drafts_offered": off,
                     "drafts_accepted": acc, "acceptance": round(acc / off, 3) if off else None,
                     "tokens_per_pass": round(gen / (gen - acc), 3)})
        print(f"{name:32s} {len(done):3d} requests, {gen:6d} tokens, drafts {acc}/{off} accepted, "
              f"{rows[-1]['tokens_per_pass']:.3f} tokens a pass")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "speculative_sampling.json"), "w") as f:
        json.dump({"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} threads",
                   "model": "installer/demo strata-demo.gguf + strata-demo-mtp.gguf, --spec 3 (default), "
                            "--draft-min-p 0.5 (default)", "prompts": QUESTIONS, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
