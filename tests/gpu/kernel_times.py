"""Where a decode pass's GPU time goes, kernel by kernel: runs `strata generate` (one prompt token, then decode
steps, ops issued directly: STRATA_CUDA_GRAPHS=0) under Nsight Compute with the single metric gpu__time_duration.sum
(one pass per kernel, no replay; caches left as the previous kernel left them unless --cache all), splits the launches into passes at the embedding kernel, and averages the
passes after the first (warm-up) per kernel name. --against OLD.json prints each kernel's change against an earlier
result (e.g. the session's base build), kernels matched by name without template arguments. The sum is the kernels' own time; a graph replay of the pass takes longer by the gaps between them, so
the two side by side say how much of a pass is launch latency and how much is kernel work.

usage: kernel_times.py --strata BIN --model SYN.gguf --out kernel_times.json [--passes N] [--against OLD.json]
       [--ncu ncu] [--extra "--flags"]
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
    ap.add_argument("--against", default="", help="an earlier kernel_times.json to print each kernel's change against")
    ap.add_argument("--cache", default="none", choices=["none", "all"],
                    help="ncu --cache-control: none keeps the caches as the previous kernel left them (as in a pass); "
                         "all flushes them before every kernel (ncu's default)")
    a = ap.parse_args(argv)
    launches = run_ncu(a)
    starts = [i for i, (n, _) in enumerate(launches) if "embed" in n or "gather_rows" in n or "dequant_rows" in n]
    if not starts:
        sys.exit("no embedding kernel found to split passes at: " + ", ".join(sorted({n for n, _ in launches}))[:2000])
    # The passes after the first, each from one embedding kernel to the next (the last to the end).
    bounds = starts + [len(launches)]
    passes = [launches[bounds[i]:bounds[i + 1]] for i in range(1, len(starts))] or [launches[starts[0]:]]
    per = collections.OrderedDict()
    for p in passes:
        for name, us in p:
            c = per.setdefault(name, [0, 0.0])
            c[0] += 1
            c[1] += us
    n_avg = len(passes)
    total = sum(v[1] for v in per.values()) / n_avg
    kernels = sum(v[0] for v in per.values()) / n_avg
    table = sorted(({"kernel": k, "calls": round(v[0] / n_avg, 1), "us": round(v[1] / n_avg, 1),
                     "us_per_call": round(v[1] / v[0], 2)} for k, v in per.items()), key=lambda r: -r["us"])
    res = {"model": os.path.basename(a.model), "flags": a.extra, "cache_control": a.cache, "launches_total": len(launches),
           "passes_found": len(starts), "passes_averaged": n_avg,
           "last_pass": {"kernels": round(kernels, 1), "kernel_us": round(total, 1)}, "table": table}
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"a pass: {kernels:.0f} kernels, {total:.1f} us of kernel time (mean of {n_avg} passes after the first)")
    for r in table[:40]:
        print(f"  {r['kernel'][:60]:60s} {r['calls']:7.1f} {r['us']:9.1f} us {r['us_per_call']:8.2f} us/call")
    if a.against:
        print_against(json.load(open(a.against)), res)
    return 0


def base_name(kernel: str) -> str:
    """The kernel's name without its template arguments and parameters (instances of two builds differ in them)."""
    for ns in ("(anonymous namespace)::", "<unnamed>::", "unnamed>::"):
        kernel = kernel.replace(ns, "")
    depth, out = 0, []
    for ch in kernel.split("(")[0]:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out).replace("void ", "").strip()


def print_against(old: dict, new: dict) -> None:
    def by_name(res):
        d = collections.defaultdict(lambda: [0.0, 0.0])
        for r in res["table"]:
            d[base_name(r["kernel"])][0] += r["calls"]
            d[base_name(r["kernel"])][1] += r["us"]
        return d
    o, n = by_name(old), by_name(new)
    print(f"against the earlier result: {old['last_pass']['kernel_us']:.1f} -> {new['last_pass']['kernel_us']:.1f} us a pass")
    rows = sorted(set(o) | set(n), key=lambda k: -abs(n[k][1] - o[k][1]))
    for k in rows[:25]:
        print(f"  {k[:60]:60s} {o[k][1]:8.1f} -> {n[k][1]:8.1f} us ({n[k][1] - o[k][1]:+7.1f})  calls {o[k][0]:.0f} -> {n[k][0]:.0f}")


if __name__ == "__main__":
    sys.exit(main())
