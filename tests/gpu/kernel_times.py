"""Where a decode pass's GPU time goes, kernel by kernel: runs `strata generate` (one prompt token, then decode
steps, ops issued directly: STRATA_CUDA_GRAPHS=0) under Nsight Compute with the single metric gpu__time_duration.sum
(one pass per kernel, no replay; caches left as the previous kernel left them unless --cache all), splits the launches into passes at the embedding kernel, and sums the last pass per
kernel name. The sum is the kernels' own time; a graph replay of the pass takes longer by the gaps between them, so
the two side by side say how much of a pass is launch latency and how much is kernel work.

usage: kernel_times.py --strata BIN --model SYN.gguf --out kernel_times.json [--ncu ncu] [--extra "--flags"]
"""
from __future__ import annotations

import argparse
import collections
import csv
import io
import json
import os
import re
import subprocess
import sys


def run_ncu(a) -> list[tuple[str, float]]:
    cmd = [a.ncu, "--csv", "--page", "raw", "--metrics", "gpu__time_duration.sum", "--clock-control", "none",
           "--cache-control", a.cache, "--kernel-name-base", "function", a.strata, "generate", "--backend", "cuda", "--model", a.model,
           "--prompt-ids", "1000", "-n", str(a.passes), "--ignore-eos"] + a.extra.split()
    env = dict(os.environ, STRATA_CUDA_GRAPHS="0")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, env=env)
    if p.returncode != 0:
        sys.exit(f"ncu failed ({p.returncode}):\n{p.stderr[-3000:]}\n{p.stdout[-2000:]}")
    text = p.stdout[p.stdout.index('"ID"'):] if '"ID"' in p.stdout else p.stdout
    rows = list(csv.reader(io.StringIO(text)))
    head = rows[0]
    name_col, time_col = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
    unit = rows[1][time_col] if len(rows) > 1 else ""
    scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(unit, 1e-3)
    out = []
    for r in rows[1:]:
        if len(r) <= time_col or not re.match(r"^[\d.,]+$", r[time_col]):
            continue
        out.append((r[name_col], float(r[time_col].replace(",", "")) * scale))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strata", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--extra", default="", help="more engine flags")
    ap.add_argument("--timeout", type=int, default=400)
    ap.add_argument("--cache", default="none", choices=["none", "all"],
                    help="ncu --cache-control: none keeps the caches as the previous kernel left them (as in a pass); "
                         "all flushes them before every kernel (ncu's default)")
    a = ap.parse_args(argv)
    launches = run_ncu(a)
    starts = [i for i, (n, _) in enumerate(launches) if "embed" in n or "gather_rows" in n or "dequant_rows" in n]
    if not starts:
        sys.exit("no embedding kernel found to split passes at: " + ", ".join(sorted({n for n, _ in launches}))[:2000])
    last = launches[starts[-1]:]
    per = collections.OrderedDict()
    for name, us in last:
        c = per.setdefault(name, [0, 0.0])
        c[0] += 1
        c[1] += us
    total = sum(us for _, us in last)
    table = sorted(({"kernel": k, "calls": v[0], "us": round(v[1], 1), "us_per_call": round(v[1] / v[0], 2)}
                    for k, v in per.items()), key=lambda r: -r["us"])
    res = {"model": os.path.basename(a.model), "flags": a.extra, "cache_control": a.cache, "launches_total": len(launches),
           "passes_found": len(starts), "last_pass": {"kernels": len(last), "kernel_us": round(total, 1)},
           "table": table}
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"last pass: {len(last)} kernels, {total:.1f} us of kernel time ({len(starts)} passes found)")
    for r in table[:40]:
        print(f"  {r['kernel'][:60]:60s} {r['calls']:5d} {r['us']:9.1f} us {r['us_per_call']:8.2f} us/call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
