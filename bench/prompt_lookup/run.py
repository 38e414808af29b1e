"""Decode speed with and without prompt-lookup drafts (--spec-lookup N) on the shipped demo model, CPU, through
`strata generate`: the three prompts of tests/engine/test_prompt_lookup.py, 256 tokens each (--ignore-eos), each run
REPS times interleaved (plain, lookup, plain, ...); medians per thread count. The text is checked equal every run.

    python bench/prompt_lookup/run.py --strata build/engine/strata --out DIR [--threads 1,2] [--depth 4] [--reps 3]
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(REPO, "tests", "engine"), os.path.join(REPO, "tests")]
from test_checkpoints import DEMO, tokens  # noqa: E402
from test_prompt_lookup import PROMPTS  # noqa: E402


def run(strata, ids, threads, extra):
    r = subprocess.run([strata, "generate", "--model", DEMO, "--prompt-ids", ",".join(map(str, ids)), "-n", "256",
                        "--ignore-eos", "--threads", str(threads), *extra], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(r.stderr[-500:])
    rate = float(re.search(r"decode: \d+ tokens in [\d.]+ s \(([\d.]+) tok/s\)", r.stderr).group(1))
    spec = re.search(r"speculation: (\d+) passes, (\d+) drafts offered, (\d+) accepted", r.stderr)
    return r.stdout.strip().splitlines()[-1], rate, (list(map(int, spec.groups())) if spec else None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", default=os.path.join(REPO, "build", "engine", "strata"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    res = {"model": os.path.relpath(DEMO, REPO), "tokens": 256, "depth": a.depth, "reps": a.reps,
           "cpu": platform.processor() or platform.machine(), "runs": {}}
    for threads in map(int, a.threads.split(",")):
        rows = {"plain": [], "lookup": [], "drafts": []}
        for _ in range(a.reps):
            for text in PROMPTS:
                ids = tokens(text)
                plain, r0, _ = run(a.strata, ids, threads, [])
                spec, r1, stats = run(a.strata, ids, threads, ["--spec-lookup", str(a.depth)])
                assert spec == plain, "the lookup run's text differs from greedy"
                rows["plain"].append(r0)
                rows["lookup"].append(r1)
                rows["drafts"].append(stats)
        res["runs"][str(threads)] = {"plain_tok_s": rows["plain"], "lookup_tok_s": rows["lookup"],
                                     "passes_offered_accepted": rows["drafts"],
                                     "plain_median": statistics.median(rows["plain"]),
                                     "lookup_median": statistics.median(rows["lookup"])}
        print(threads, "threads: plain", res["runs"][str(threads)]["plain_median"], "lookup",
              res["runs"][str(threads)]["lookup_median"], "tok/s (medians)")
    with open(os.path.join(a.out, "prompt_lookup.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
