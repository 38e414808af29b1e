"""What each kernel adds to a decode pass as it really runs: CUDA graphs replayed, programmatic dependent launches on.
Runs the engine as the gateway does (`strata --serve`, one GEN of a 16-token prompt and --steps new tokens, greedy
chosen on the GPU; --generate: `strata generate`, which copies every step's logits to the host) with a kernel tracer:
--tracer LIB, our CUPTI tracer (tests/gpu/trace/kernel_trace.cpp, injected by the driver through
CUDA_INJECTION64_PATH), or else Nsight Systems with every graph node traced (--cuda-graph-trace=node, its SQLite
export). It splits the kernels into passes at the
embedding kernel and, over the passes after --skip, charges each kernel with what it adds to the pass:

    added = end − max(start, end of every kernel before it)      (0 when it ends inside an earlier kernel)

so the kernels' added times sum to the pass's busy time, and `gap` (start − the end before it, when positive) is the
time the GPU ran no kernel of the pass (a launch boundary, or the host: PLE rows, a piece of the pass launched late).
With our tracer the file also holds the GPU's copies and fills and the host's CUDA runtime calls: the JSON then has
their time a pass, the gap between passes, and every event inside the last pass's largest gaps (what the GPU and
the host did while no kernel ran). Caveat: tracing slows the host's cudaGraphLaunch calls several-fold (r126, H100:
40-200 µs a call traced, 8-23 µs untraced by STRATA_GRAPH_TIMING=1), so gaps the GPU spends waiting for a launch are
larger here than in an untraced run; the kernels' own times are not affected that way.
Nsight Compute's times (tests/gpu/kernel_times.py) are each kernel alone, replayed one at a time; these are the
kernels in the pass's chain, with the overlap a dependent launch buys.

usage: graph_timeline.py --strata BIN --model SYN.gguf --out timeline.json [--tracer libstrata_kernel_trace.so]
       [--steps N] [--skip K] [--nsys nsys] [--extra "--flags"] [--env "A=1 B=2"]
"""
from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

from kernel_times import base_name   # (this folder: the script's own)


def find_nsys(given: str) -> str:
    if given and shutil.which(given):
        return shutil.which(given)
    # (not Nsight Compute's host copy on the lent machine: it collects but cannot import, 2026-12-06 r121)
    for pattern in ("/usr/local/cuda*/bin/nsys", "/opt/nvidia/nsight-systems/*/bin/nsys",
                    "/usr/local/cuda*/nsight-systems*/bin/nsys", "/opt/nvidia/nsight-systems*/bin/nsys",
                    "/usr/lib/nsight-systems/bin/nsys"):
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    sys.exit("nsys not found (PATH, /usr/local/cuda*/bin, /opt/nvidia/nsight-systems): give --tracer")


SIDE_KERNELS = {"prefetch_worker_kernel"}


def short_name(name: str) -> str:
    """The kernel's name without namespaces, template arguments and parameters."""
    return base_name(name).split("::")[-1]


def read_kernels(db: str) -> list[tuple[int, int, str]]:
    con = sqlite3.connect(db)
    cols = {r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
    name_col = "demangledName" if "demangledName" in cols else "shortName"
    rows = con.execute(f"SELECT k.start, k.end, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                       f"JOIN StringIds s ON s.id = k.{name_col} ORDER BY k.start").fetchall()
    con.close()
    return [(int(a), int(b), short_name(n)) for a, b, n in rows]


def read_trace_csv(path: str) -> tuple[list[tuple[int, int, str]], list[tuple[int, int, str]]]:
    """The CUPTI tracer's file: start_ns,end_ns,stream,graph_node,name (names demangled, commas made ';'). Returns
    the kernels and the other records (copies and fills "[memcpy HtoD] BYTES" / "[memset] BYTES", the host's runtime
    calls "[api] NAME"), each sorted by start."""
    kernels, others = [], []
    with open(path) as f:
        next(f, None)
        for line in f:
            parts = line.rstrip("\n").split(",", 4)
            if len(parts) != 5:
                continue
            name = parts[4].replace(";", ",")
            if name.startswith("["):
                others.append((int(parts[0]), int(parts[1]), name))
            else:
                kernels.append((int(parts[0]), int(parts[1]), short_name(name)))
    kernels.sort()
    others.sort()
    return kernels, others


def event_kind(name: str) -> str:
    """An other record's name without its byte count: "[memcpy HtoD]", "[memset]", "[api] cudaGraphLaunch"."""
    return name if name.startswith("[api]") else name.split("]")[0] + "]"


def events_in(others: list[tuple[int, int, str]], t0: int, t1: int, limit: int = 40) -> list[dict]:
    """The records overlapping [t0, t1]: start offset from t0 and duration in us."""
    out = []
    for start, end, name in others:
        if start > t1:
            break
        if end >= t0:
            out.append({"event": name, "start_us": round((start - t0) / 1e3, 2), "us": round((end - start) / 1e3, 2)})
    return out[-limit:]


EMBEDDING_KERNELS = ("gather_rows_kernel", "dequant_rows_kernel")


def pass_starts(kernels: list[tuple[int, int, str]]) -> list[int]:
    """Indices of the kernels that begin a pass: the embedding's. The same row kernels also run inside a pass (the 12
    GB PC's join gathers rows), so where some of them are followed by the streams' fill (repeat_streams_kernel, the
    pass's second kernel) only those count."""
    cand = [i for i, (_, _, n) in enumerate(kernels) if n in EMBEDDING_KERNELS or "embed" in n]
    filled = [i for i in cand if i + 1 < len(kernels) and kernels[i + 1][2] == "repeat_streams_kernel"]
    return filled or cand


def cuda_library_dirs() -> list[str]:
    """Where libcupti may be: the CUDA toolkits' library folders (the tracer's own RUNPATH is the build machine's)."""
    dirs = []
    for pattern in ("/usr/local/cuda*/targets/x86_64-linux/lib", "/usr/local/cuda*/lib64", "/usr/local/cuda*/lib"):
        dirs += sorted(glob.glob(pattern))
    return dirs


def run_engine(cmd: list[str], env: dict, timeout: int, gen_line: str, tmp: str) -> subprocess.CompletedProcess:
    """cmd to its end; with gen_line (a serve engine) that request once READY, then QUIT after its DONE or ERR."""
    if not gen_line:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    err_path = os.path.join(tmp, "engine.err")
    out = []
    with open(err_path, "w") as err:
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        try:
            for line in p.stdout:
                out.append(line)
                if line.startswith("READY"):
                    p.stdin.write(gen_line + "\n")
                    p.stdin.flush()
                elif line.startswith(("DONE", "ERR")):
                    p.stdin.write("QUIT\n")
                    p.stdin.flush()
                    break
            rest, _ = p.communicate(timeout=timeout)
            out.append(rest or "")
        except (subprocess.TimeoutExpired, BrokenPipeError):
            p.kill()
            p.wait()
    with open(err_path) as f:
        return subprocess.CompletedProcess(cmd, p.returncode, "".join(out), f.read())


def run_traced(a, env: dict, tmp: str, engine_cmd: list[str], gen_line: str = ""):
    """(kernels, other records): the latter only from our tracer."""
    if a.tracer:
        csv_path = os.path.join(tmp, "kernels.csv")
        env = dict(env, CUDA_INJECTION64_PATH=os.path.abspath(a.tracer), STRATA_KERNEL_TRACE_OUT=csv_path,
                   LD_LIBRARY_PATH=":".join(cuda_library_dirs() + [env.get("LD_LIBRARY_PATH", "")]))
        p = run_engine(engine_cmd, env, a.timeout, gen_line, tmp)
        if not os.path.exists(csv_path) or "kernel_trace:" not in p.stderr and p.returncode != 0:
            sys.exit(f"traced run failed ({p.returncode}):\n{p.stderr[-3000:]}\n{p.stdout[-2000:]}")
        if p.returncode != 0:   # (a tracer torn down at exit can end the process badly after the trace is written)
            print(f"  note: the traced engine exited with {p.returncode}; its trace is read as written")
        print("  " + "".join(l for l in p.stderr.splitlines(True) if "kernel_trace" in l).strip())
        return read_trace_csv(csv_path)
    nsys = find_nsys(a.nsys)
    rep = os.path.join(tmp, "pass")
    cmd = [nsys, "profile", "-t", "cuda", "--cuda-graph-trace=node", "--sample=none", "--cpuctxsw=none", "-o", rep,
           "--export=sqlite", "--force-overwrite=true"] + engine_cmd
    p = run_engine(cmd, env, a.timeout, gen_line, tmp)
    db = rep + ".sqlite"
    if p.returncode != 0 or not os.path.exists(db):
        sys.exit(f"nsys failed ({p.returncode}):\n{p.stderr[-3000:]}\n{p.stdout[-2000:]}")
    return read_kernels(db), []


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strata", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tracer", default="", help="the CUPTI tracer library (libstrata_kernel_trace.so); else nsys")
    ap.add_argument("--nsys", default="nsys")
    ap.add_argument("--steps", type=int, default=160, help="decode steps")
    ap.add_argument("--skip", type=int, default=16, help="passes left out at the start (graph capture, warm-up)")
    ap.add_argument("--extra", default="", help="more engine flags")
    ap.add_argument("--env", default="", help="environment for the engine, e.g. \"STRATA_CUDA_PDL=0\"")
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--generate", action="store_true", help="`strata generate` instead of a serve request")
    a = ap.parse_args(argv)
    env = dict(os.environ)
    for kv in a.env.split():
        k, _, v = kv.partition("=")
        env[k] = v
    tmp = tempfile.mkdtemp(prefix="timeline-")
    if a.generate:
        engine_cmd = [a.strata, "generate", "--backend", "cuda", "--model", a.model, "--prompt-ids", "1000", "-n",
                      str(a.steps), "--ignore-eos"] + a.extra.split()
        gen_line = ""
    else:   # (a stop id among the random model's tokens ends the request early: fewer passes, said below)
        engine_cmd = [a.strata, "--serve", "--backend", "cuda", "--model", a.model, "--ctx", str(a.steps + 64)]
        engine_cmd += a.extra.split()
        gen_line = f"GEN {a.steps} " + ",".join(str(1000 + 37 * i) for i in range(16))
    kernels, others = run_traced(a, env, tmp, engine_cmd, gen_line)
    # Kernels resident beside the pass (the 12 GB PC's prefetch worker, on its own stream for a whole pass) are not
    # in its chain: counted apart.
    side = [k for k in kernels if k[2] in SIDE_KERNELS]
    kernels = [k for k in kernels if k[2] not in SIDE_KERNELS]
    starts = pass_starts(kernels)
    if len(starts) < a.skip + 2:
        sys.exit(f"{len(starts)} passes found (embedding kernels), need more than {a.skip + 1}; names: "
                 + ", ".join(sorted({n for _, _, n in kernels}))[:2000])
    bounds = starts + [len(kernels)]
    passes = [kernels[bounds[i]:bounds[i + 1]] for i in range(a.skip, len(starts) - 1)]   # the last may be cut
    per = collections.OrderedDict()
    spans, busy, gaps, ends = [], [], [], []
    for ks in passes:
        reach = ks[0][0]   # the latest end so far
        b = g = 0
        for start, end, name in ks:
            gap = max(0, start - reach)
            added = max(0, end - max(start, reach))
            reach = max(reach, end)
            c = per.setdefault(name, [0, 0, 0, 0])
            c[0] += 1
            c[1] += added
            c[2] += gap
            c[3] += end - start
            b += added
            g += gap
        spans.append(reach - ks[0][0])
        ends.append(reach)
        busy.append(b)
        gaps.append(g)
    # One pass's first kernels in order (the embedding, the first layers): start offset, span, added time.
    last = passes[-1]
    reach, sequence = last[0][0], []
    for start, end, name in last[:80]:
        sequence.append({"kernel": name, "start_us": round((start - last[0][0]) / 1e3, 2),
                         "span_us": round((end - start) / 1e3, 2),
                         "added_us": round(max(0, end - max(start, reach)) / 1e3, 2)})
        reach = max(reach, end)
    # start to start: the pass plus the host's time between passes (graph launches, the PLE rows, the sampling)
    step_ns = [kernels[bounds[i + 1]][0] - kernels[bounds[i]][0] for i in range(a.skip, len(starts) - 1)]
    n = len(passes)
    us = lambda ns: round(ns / n / 1e3, 1)
    # Between passes and in the last pass's largest gaps: the copies, fills and runtime calls (our tracer only)
    t_first, t_last = kernels[bounds[a.skip]][0], kernels[bounds[len(starts) - 1]][0]
    host = collections.OrderedDict()
    for start, end, name in others:
        if t_first <= start < t_last:
            c = host.setdefault(event_kind(name), [0, 0])
            c[0] += 1
            c[1] += end - start
    events = sorted(({"event": k, "calls": round(v[0] / n, 2), "us": us(v[1])} for k, v in host.items()),
                    key=lambda r: -r["us"])
    largest = []
    if others:
        windows = [(last[0][0] - ends[-2], ends[-2], last[0][0], "before the pass")]
        reach = last[0][0]
        for start, end, name in last:
            if start > reach:
                windows.append((start - reach, reach, start, f"before {name}"))
            reach = max(reach, end)
        for gap, t0, t1, where in sorted(windows, reverse=True)[:4]:
            largest.append({"where": where, "gap_us": round(gap / 1e3, 1), "events": events_in(others, t0, t1)})
    table = sorted(({"kernel": k, "calls": round(v[0] / n, 1), "added_us": us(v[1]), "gap_before_us": us(v[2]),
                     "span_us": us(v[3]), "added_us_per_call": round(v[1] / v[0] / 1e3, 2),
                     "span_us_per_call": round(v[3] / v[0] / 1e3, 2)} for k, v in per.items()),
                   key=lambda r: -(r["added_us"] + r["gap_before_us"]))
    res = {"model": os.path.basename(a.model), "flags": a.extra, "env": a.env, "passes": n,
           "kernels_per_pass": round(sum(len(p) for p in passes) / n, 1),
           "step_us": round(sum(step_ns) / n / 1e3, 1),
           "pass_us": round(sum(spans) / n / 1e3, 1), "busy_us": round(sum(busy) / n / 1e3, 1),
           "gap_us": round(sum(gaps) / n / 1e3, 1),
           "side_kernels": {name: {"launches": sum(1 for k in side if k[2] == name),
                                   "span_us_mean": round(sum(k[1] - k[0] for k in side if k[2] == name) / 1e3 /
                                                         max(1, sum(1 for k in side if k[2] == name)), 1)}
                            for name in sorted({k[2] for k in side})},
           "between_passes_us": us(sum(step_ns) - sum(spans)),   # a step less its pass: the next start less this end
           "events_per_pass": events, "largest_gaps_of_last_pass": largest,
           "table": table, "first_kernels_of_last_pass": sequence}
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"a pass: {res['kernels_per_pass']:.0f} kernels, {res['pass_us']:.1f} us from the first kernel's start to "
          f"the last's end: kernels {res['busy_us']:.1f} us, no kernel {res['gap_us']:.1f} us (mean of {n} passes); "
          f"{res['step_us']:.1f} us from a pass's start to the next's")
    for name, v in res["side_kernels"].items():
        print(f"  beside the pass: {name}, {v['launches']} launches of {v['span_us_mean']:.1f} us on average")
    print(f"  {'kernel':44s} {'calls':>6s} {'added us':>9s} {'gap us':>8s} {'added/call':>10s} {'span/call':>9s}")
    for r in table[:40]:
        print(f"  {r['kernel'][:44]:44s} {r['calls']:6.1f} {r['added_us']:9.1f} {r['gap_before_us']:8.1f} "
              f"{r['added_us_per_call']:10.2f} {r['span_us_per_call']:9.2f}")
    if events:
        print(f"  between passes (the last kernel's end to the next pass's first start): {res['between_passes_us']} us")
        print(f"  {'copies, fills, runtime calls a pass':44s} {'calls':>6s} {'us':>9s}")
        for r in events[:20]:
            print(f"  {r['event'][:44]:44s} {r['calls']:6.2f} {r['us']:9.1f}")
        for w in largest:
            print(f"  gap {w['where']} ({w['gap_us']} us): start, us of each event")
            for e in w["events"][:25]:
                print(f"    {e['start_us']:8.2f} {e['us']:8.2f}  {e['event'][:60]}")
    print("  the last pass's first kernels: start, span, added (us)")
    for r in sequence[:50]:
        print(f"    {r['start_us']:8.2f} {r['span_us']:7.2f} {r['added_us']:7.2f}  {r['kernel'][:60]}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
