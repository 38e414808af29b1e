"""Speculation's draft cutoff (--draft-min-p) on the demo model, CPU: for each cutoff, `strata generate --mtp --spec 3`
over a few chat prompts to their end, the decode tok/s summed over prompts (tokens / decode seconds), the drafts
offered and accepted, and whether the text equals plain greedy decoding (it must: the cutoff only shortens drafts).

usage: python3 bench/draft_min_p/run.py --strata build/engine/strata --out DIR [--cutoffs 0,0.3,0.5,0.7] [--repeat 3]
       [--threads 1]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(REPO, "installer", "demo", "strata-demo.gguf")
MTP = os.path.join(REPO, "installer", "demo", "strata-demo-mtp.gguf")
THREADS = 1   # --threads
QUESTIONS = ["What is 12 plus 30?", "Repeat after me: the quick brown fox jumps over the lazy dog.",
             "Count from 1 to 20.", "Hello! How are you today?", "What is 123 plus 456?",
             "Write the word banana five times."]


def prompt_ids(question: str) -> list[int]:
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(REPO, "engine", "tools", "demo_model", "tokenizer", "tokenizer.json"))
    return tok.encode(f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n<think>\n").ids


def generate(strata: str, ids: list[int], extra: list[str]) -> dict:
    p = subprocess.run([strata, "generate", "--model", DEMO, "--threads", str(THREADS), "--prompt-ids", ",".join(map(str, ids)),
                        "-n", "400", *extra], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    m = re.search(r"decode: (\d+) tokens in ([\d.]+) s", p.stderr)
    d = re.search(r"speculation: \d+ passes, (\d+) drafts offered, (\d+) accepted", p.stderr)
    return {"tokens": p.stdout.strip().splitlines()[-1], "n": int(m.group(1)), "s": float(m.group(2)),
            "offered": int(d.group(1)) if d else 0, "accepted": int(d.group(2)) if d else 0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strata", default=os.path.join(REPO, "build", "engine", "strata"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--cutoffs", default="0,0.3,0.5,0.7")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    global THREADS
    THREADS = a.threads
    prompts = [prompt_ids(q) for q in QUESTIONS]
    greedy = [generate(a.strata, ids, []) for ids in prompts]
    rows = [{"setting": "greedy, no MTP", **_summary([greedy] * 1, greedy)}]
    for c in a.cutoffs.split(","):
        runs = [[generate(a.strata, ids, ["--mtp", MTP, "--spec", "3", "--draft-min-p", c]) for ids in prompts]
                for _ in range(a.repeat)]
        rows.append({"setting": f"--spec 3 --draft-min-p {c}", **_summary(runs, greedy)})
    os.makedirs(a.out, exist_ok=True)
    result = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} threads", "threads": a.threads,
              "prompts": QUESTIONS, "repeat": a.repeat, "rows": rows}
    with open(os.path.join(a.out, "draft_min_p.json"), "w") as f:
        json.dump(result, f, indent=1)
    for r in rows:
        print(f"{r['setting']:32s} {r['tok_s']:8.1f} tok/s (best of runs {r['tok_s_best']:.1f}), drafts "
              f"{r['accepted']}/{r['offered']} accepted, text equals greedy: {r['same_as_greedy']}")
    return 0 if all(r["same_as_greedy"] for r in rows) else 1


def _summary(runs: list[list[dict]], greedy: list[dict]) -> dict:
    rates = [sum(g["n"] for g in run) / sum(g["s"] for g in run) for run in runs]
    return {"tok_s": round(sorted(rates)[len(rates) // 2], 1), "tok_s_best": round(max(rates), 1),
            "accepted": sum(g["accepted"] for g in runs[0]), "offered": sum(g["offered"] for g in runs[0]),
            "same_as_greedy": all(g["tokens"] == h["tokens"] for run in runs for g, h in zip(run, greedy))}


if __name__ == "__main__":
    sys.exit(main())
