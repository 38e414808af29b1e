"""Decode benchmark of issue #7 over the serve protocol (protocol.md): decode and prompt tok/s of `strata --serve` on
the synthetic full-size model (engine/tools/make_synthetic.py) at several contexts, for
  gpu   every expert on the GPU (no --expert-cache), which also records a routing profile of what it routed;
  pc12  a 12 GB PC stand-in: --expert-cache 4100-slots --cpu-workers 6, the cache filled from that profile (recorded
        on other prompts than the ones measured here), adaptation and the zero-copy share (auto) as the engine's
        defaults, the device-driven join;
  pc12hostjoin  (optional) pc12 with STRATA_HYBRID_DEVICE=0: the host-driven join of every MoE layer (routing
        copied back, a host wait, graph segments), smallest context only: the A/B of the device join.
  pc12host  (optional) pc12hostjoin with STRATA_HYBRID_JOIN=host, the CPU misses computed on the calling thread (the join
        before the mapped-flag wait), at the smallest context only.
  pc12pcie  (optional; pc12pcie:0.9 names its share) pc12hostjoin with STRATA_GPU_MISS_SHARE=--miss-share: that share
        of each decode pass's missed experts copied over PCIe while the CPU computes the rest, smallest context.
  pc12dev   (optional; pc12dev:0.6 = STRATA_GPU_MISS_SHARE=0.6) pc12 at a fixed zero-copy share, smallest context
        only: the A/B of the auto share.
  pc12nostage  (optional) pc12 with STRATA_HYBRID_STAGE=0: the decode kernels read the zero-copy experts from host
        memory themselves instead of a copy kernel staging them in VRAM first, smallest context only.
Any setting may carry environment variables after a '+': gpu+STRATA_CUDA_PDL=0, pc12+STRATA_CUDA_PREFETCH=0+X=1 (an
A/B of an engine switch, smallest context only; a gpu variant records no routing profile); STRATA_BIN=PATH runs another
build of the engine (an A/B of two builds). A '#N' at the end names a
repeat of a setting (gpu+X=0#2), so that A/B runs can alternate: ABAB rather than AABB.
Beside each figure the bound of PERFORMANCE.md §4 from the measured bandwidths (formula and inputs in the JSON).

    python3 bench/decode.py --strata BUILD/engine/strata --model SYN.gguf --out DIR [--contexts 1024,4096,32768]

Each context is reached by extending the session (prefix reuse), then a separate request decodes: its DONE is the
decode pass alone (one prompt token). A context whose prompt would not fit the time budget at the prompt speed
measured so far is skipped and says so."""
from __future__ import annotations

import argparse
import json
import math
import os
import queue
import random
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "engine", "tools"))

# Measured bandwidths and latencies, PERFORMANCE.md §4.4 (H200 host, 2026-11-29).
W_HBM = 4453e9          # GPU kernel read of HBM, bytes/s
W_CPU_6 = 66.3e9        # host DRAM read with 6 threads: between 51.6 (4 threads) and 81.0 (8), interpolated
T_HANDSHAKE = 7.4e-6    # one D2H or H2D handshake (6.6-8.2 µs measured); a layer's join costs two
W_PCIE_ZC = 50.1e9      # a kernel's 16-byte loads of pinned host memory (tests/gpu/zero_copy_speed.cu read10, 2026-12-02)
TARGETS = {"gpu": 400.0, "pc12": 100.0}
PC12_FLAGS = ["--expert-cache", "4100-slots", "--cpu-workers", "6"]
BUDGET_WEIGHT = {"gpu": 1.0, "pc12": 1.4, "pc12host": 0.6, "pc12hostjoin": 0.6, "pc12pcie": 0.8, "pc12dev": 0.6,
                 "pc12nostage": 0.6}   # shares of the time budget (pc12 pins and prefills
                                                             # over PCIe; pc12host measures one context)


class Engine:
    """One `strata --serve` process; lines from its stdout arrive through a reader thread."""

    def __init__(self, cmd: list[str], log_path: str, env: dict | None = None):
        self.log = open(log_path, "w")
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                  bufsize=1, env={**os.environ, **(env or {})})
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.info: dict[str, str] = {}

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def next_line(self, deadline: float) -> str:
        try:
            line = self.lines.get(timeout=max(0.1, deadline - time.time()))
        except queue.Empty:
            raise TimeoutError("the engine said nothing before the deadline")
        if line is None:
            raise RuntimeError(f"the engine exited (rc {self.p.wait()}); see {self.log.name}")
        return line

    def ready(self, timeout: float) -> float:
        t0 = time.time()
        while True:
            line = self.next_line(t0 + timeout)
            if line.startswith("INFO "):
                k, _, v = line[5:].partition("=")
                self.info[k] = v
            elif line.startswith("READY"):
                if int(line.split()[1]) <= 0:
                    raise RuntimeError(f"the engine failed to start; see {self.log.name}")
                return time.time() - t0

    def gen(self, max_new: int, ids: list[int], timeout: float) -> dict:
        self.p.stdin.write(f"GEN {max_new} {','.join(map(str, ids))}\n")
        self.p.stdin.flush()
        deadline = time.time() + timeout
        r = {"tokens": []}
        while True:
            line = self.next_line(deadline)
            w, _, rest = line.partition(" ")
            if w == "RESUME":
                r["resume"] = int(rest)
            elif w == "T":
                r["tokens"].append(int(rest))
            elif w == "ERR":
                raise RuntimeError("engine: " + rest)
            elif w == "DONE":
                f = rest.split()
                r.update(generated=int(f[0]), prompt=int(f[1]), prompt_ms=float(f[2]), decode_ms=float(f[3]),
                         finish=f[4], drafts_accepted=int(f[5]), drafts_offered=int(f[6]), reused=int(f[7]),
                         cache_hits=int(f[8]), cache_lookups=int(f[9]))
                for kv in f[10:]:
                    k, _, v = kv.partition("=")
                    r[k] = float(v)
                return r

    def quit(self, timeout: float = 60) -> int:
        try:
            self.p.stdin.write("QUIT\n")
            self.p.stdin.flush()
            self.p.stdin.close()
            return self.p.wait(timeout=timeout)
        except (subprocess.TimeoutExpired, BrokenPipeError):
            self.p.kill()
            return self.p.wait()
        finally:
            self.log.close()


def model_bytes(path: str) -> dict:
    """Bytes a decode token reads: dense (every tensor but the routed experts, the token embedding and the PLE table,
    of which a token reads a row or a few) and routed (k experts per layer)."""
    from gguf_quant import TYPES        # engine/tools: gguf-py's reader rejects Q2_0 (ggml type 42)
    from gguf_read import GGUFFile
    r = GGUFFile(path)
    expert, dense, layers = 0, 0, set()
    for name, (ne, type_name, _) in r.tensors.items():
        _, block_elems, block_bytes = TYPES[type_name]
        n_bytes = math.prod(ne) // block_elems * block_bytes
        if "_exps." in name:
            expert += n_bytes
            layers.add(name.split(".")[1])
        elif name not in ("token_embd.weight", "per_layer_token_embd.weight"):
            dense += n_bytes
    k = int(r.value("qwen4exp.expert_used_count"))
    E = int(r.value("qwen4exp.expert_count"))
    n_layers = len(layers)
    per_expert = expert / (n_layers * E)
    return {"dense_bytes": dense, "expert_bytes": per_expert, "experts_per_token": k, "moe_layers": n_layers,
            "experts_per_layer": E, "routed_bytes": k * n_layers * per_expert}


def prompt_ids(n: int, seed: int, vocab: int = 248320) -> list[int]:
    rnd = random.Random(seed)
    return [rnd.randrange(vocab // 8, min(200000, vocab * 3 // 4)) for _ in range(n)]


def bound(setting: str, mb: dict, hit_rate: float | None) -> dict:
    """PERFORMANCE.md §4.3 for this machine: T = B_d/W_gpu + h·B_e/W_gpu (+ or max) (1−h)·B_e/W_cpu + T_sync."""
    Bd, Be = mb["dense_bytes"], mb["routed_bytes"]
    if setting == "gpu":
        t = (Bd + Be) / W_HBM
        return {"formula": "(B_d + B_e) / W_gpu", "B_d": Bd, "B_e": Be, "W_gpu": W_HBM, "ms": round(t * 1e3, 3),
                "tok_s": round(1 / t, 1)}
    h = hit_rate if hit_rate is not None else 0.0
    gpu = Bd / W_HBM + h * Be / W_HBM
    miss = (1 - h) * Be / W_CPU_6
    sync = mb["moe_layers"] * 2 * T_HANDSHAKE
    serial, overlap = gpu + miss + sync, max(gpu, miss) + sync
    # The engine also reads a share of the misses over PCIe (the device join's zero-copy share): both read at once.
    miss_both = (1 - h) * Be / (W_CPU_6 + W_PCIE_ZC)
    return {"formula": "B_d/W_gpu + h*B_e/W_gpu (+ | max) (1-h)*B_e/W_cpu + layers*2*t_handshake",
            "B_d": Bd, "B_e": Be, "h": round(h, 4), "W_gpu": W_HBM, "W_cpu": W_CPU_6, "t_handshake": T_HANDSHAKE,
            "gpu_ms": round(gpu * 1e3, 3), "miss_ms": round(miss * 1e3, 3), "sync_ms": round(sync * 1e3, 3),
            "serial_tok_s": round(1 / serial, 1), "overlapped_tok_s": round(1 / overlap, 1),
            "with_pcie": {"formula": "max(gpu, (1-h)*B_e/(W_cpu + W_pcie)) + sync", "W_pcie": W_PCIE_ZC,
                          "miss_ms": round(miss_both * 1e3, 3),
                          "overlapped_tok_s": round(1 / (max(gpu, miss_both) + sync), 1)}}


def measure_setting(a, setting: str, flags: list[str], seed: int, mb: dict, deadline: float,
                    contexts: list[int], env: dict | None = None) -> dict:
    ctx_max = max(contexts) + a.decode + 64
    exe = (env or {}).get("STRATA_BIN", a.strata)   # gpu+STRATA_BIN=PATH: another build of the engine (an A/B of builds)
    cmd = [exe, "--serve", "--backend", a.backend, "--model", a.model, "--ctx", str(ctx_max), "--chunk",
           str(a.chunk)] + flags
    out = {"command": " ".join(cmd), "env": env or {}, "contexts": {}}
    kind = setting.partition("#")[0].partition("/")[0].partition("+")[0].partition(":")[0]   # gpu, pc12, ...: no suffixes
    log_name = "".join(c if c.isalnum() or c in "._-" else "_" for c in setting)
    eng = Engine(cmd, os.path.join(a.out, f"{log_name}.log"), env)
    try:
        out["start_s"] = round(eng.ready(max(30, deadline - time.time())), 1)
        out["info"] = eng.info
        V = int(eng.info.get("vocab", 248320))
        # Kernels, first-touch allocations; with --warm N also the cache's adaptation and the auto share's tuning.
        warm = eng.gen(a.warm, prompt_ids(64, seed + 1, V), 120)
        out["warm_tokens"] = warm["tokens"]
        session = prompt_ids(64, seed + 1, V) + warm["tokens"]
        pp_speed = None
        for ctx in sorted(contexts):
            row: dict = {}
            out["contexts"][str(ctx)] = row
            add = ctx - len(session) - 1
            # Longer contexts read slower (QSA selection per token): 1.5x the time at the speed measured so far.
            if add > 0 and pp_speed and 1.5 * add / pp_speed > deadline - time.time() - 20:
                row["skipped"] = (f"the prompt of {add} more tokens at the {pp_speed:.0f} tok/s measured so far "
                                  f"(x1.5) would not fit the {deadline - time.time():.0f} s left")
                continue
            prompt = session + prompt_ids(max(add, 0), seed * 1000 + ctx, V)
            r = eng.gen(1, prompt, max(30, deadline - time.time()))
            read = r["prompt"] - r["reused"]
            pp_speed = read / max(r["prompt_ms"], 1e-3) * 1e3
            row.update(prompt_tokens_read=read, reused=r["reused"], prompt_ms=r["prompt_ms"],
                       prompt_tok_s=round(pp_speed, 1))
            for key in ("pcie_bytes", "cpu_ms"):
                if key in r:
                    row["prompt_" + key] = r[key]
            session = prompt + r["tokens"]
            d = eng.gen(a.decode, session, max(30, deadline - time.time()))
            assert d["reused"] == len(session) - 1, (d["reused"], len(session))
            session = session + d["tokens"]
            n = d["generated"]
            if n < 2:
                row["error"] = f"the decode request ended after {n} token ({d['finish']})"
                continue
            # One prompt-token pass, then one pass a decode step: a token, or with speculation a verify window of
            # the token and its drafts (after the MTP head's draft passes), which yields 1 + its accepted drafts.
            passes = n - d["drafts_accepted"]
            pass_ms = (d["prompt_ms"] + d["decode_ms"]) / passes
            row["tokens"] = d["tokens"]   # NAME/mtp against NAME: speculation must give the same greedy tokens
            row.update(context=len(session) - n, decode_tokens=n,
                       decode_tok_s=round((n - 1) / max(d["decode_ms"], 1e-3) * 1e3, 2), pass_ms=round(pass_ms, 3))
            if d["drafts_offered"]:
                # A random MTP head's drafts are almost never accepted: what a window costs, not what it gains.
                # tok/s at A tokens a window = A / the window's time (drafts + verify), for acceptances measured
                # elsewhere on windows of 4: the demo model's 2.29 (bench/results/2026-12-05-vm-speculative-sampling)
                # and the reference system's 2.4-3.2 (PRODUCT.md §4), those a window can hold, and every draft
                # accepted. Projections, not measurements.
                steps = n - 1 - d["drafts_accepted"]
                step_ms = d["decode_ms"] / max(steps, 1)
                window = 1 + round(d["drafts_offered"] / max(steps, 1))
                accept = sorted({A for A in (2.29, 2.4, 3.2) if A <= window} | {window})
                row["speculation"] = {
                    "drafts_offered": d["drafts_offered"], "drafts_accepted": d["drafts_accepted"],
                    "window_ms": round(step_ms, 3), "drafts_per_window": round(d["drafts_offered"] / max(steps, 1), 2),
                    "split_ms_per_window": {k: round(d[k + "_ms"] / max(steps, 1), 3)
                                            for k in ("draft", "verify", "rollback") if k + "_ms" in d},
                    "projected_tok_s_at_tokens_per_window": {str(A): round(A / step_ms * 1e3, 1) for A in accept}}
            if "ple_wait_ms" in d:   # the PLE table's rows: waited for at the PLE layer, or found in the row cache
                asked = d["ple_rows_read"] + d["ple_rows_cached"]
                row["ple"] = {"wait_ms_per_pass": round(d["ple_wait_ms"] / passes, 3),
                              "rows_read_per_pass": round(d["ple_rows_read"] / passes, 2),
                              "cached_share": round(d["ple_rows_cached"] / asked, 3) if asked else None}
            if d["cache_lookups"]:
                h = d["cache_hits"] / d["cache_lookups"]
                split = {"pass_ms": round(pass_ms, 3)}
                if "cpu_ms" in d:
                    # gpu_and_host_ms: the pass less its two waits (for the CPU's misses, for the PLE rows)
                    cpu_ms, wait_ms = d["cpu_ms"] / passes, d["gpu_wait_ms"] / passes
                    ple_ms = d.get("ple_wait_ms", 0.0) / passes
                    split.update(cpu_misses_ms=round(cpu_ms, 3), gpu_wait_for_cpu_ms=round(wait_ms, 3),
                                 ple_wait_ms=round(ple_ms, 3), gpu_and_host_ms=round(pass_ms - wait_ms - ple_ms, 3))
                    row["cpu_gb_s"] = round(d["cpu_bytes"] / max(d["cpu_ms"], 1e-3) / 1e6, 2)
                    row["cpu_mb_per_pass"] = round(d["cpu_bytes"] / passes / 1e6, 2)
                if d.get("pcie_bytes"):   # decode misses staged over PCIe (pc12pcie)
                    row["pcie_mb_per_pass"] = round(d["pcie_bytes"] / passes / 1e6, 2)
                row.update(hit_rate=round(h, 4), time_split=split)
                row["bound"] = bound("pc12", mb, h)
                b = row["bound"]["overlapped_tok_s"]
                row["share_of_overlapped_bound"] = round(row["decode_tok_s"] / b, 3)
            else:
                row["bound"] = bound(kind, mb, None)
                row["share_of_bound"] = round(row["decode_tok_s"] / row["bound"]["tok_s"], 3)
            row["target_tok_s"] = TARGETS["gpu" if kind == "gpu" else "pc12"]
            print(f"{setting} ctx {row['context']}: decode {row['decode_tok_s']} tok/s, prompt {row['prompt_tok_s']} "
                  f"tok/s" + (f", PLE wait {row['ple']['wait_ms_per_pass']} ms a pass" if "ple" in row else "") +
                  (f", hit {row['hit_rate']}, split {row['time_split']}" if "hit_rate" in row else ""), flush=True)
    except (TimeoutError, RuntimeError, AssertionError) as e:
        out["error"] = str(e)
        print(f"{setting}: {e}", flush=True)
    out["exit_code"] = eng.quit()
    return out


def derive_missing(res: dict) -> None:
    """A pc12 context skipped for time: its decode is derived from the gpu setting's measured cost of that context
    (attention/indexer run on the GPU in both settings) added to pc12's pass time at the longest measured context."""
    g, p = res["settings"].get("gpu", {}).get("contexts", {}), res["settings"].get("pc12", {}).get("contexts", {})
    done = [c for c in p if "pass_ms" in p[c] and "pass_ms" in g.get(c, {})]
    if not done:
        return
    base = max(done, key=int)
    for c, row in p.items():
        if "skipped" in row and "pass_ms" in g.get(c, {}):
            extra = g[c]["pass_ms"] - g[base]["pass_ms"]
            ms = p[base]["pass_ms"] + extra
            row["derived"] = {"decode_tok_s": round(1e3 / ms, 2), "pass_ms": round(ms, 3),
                              "how": f"pc12 pass at {base} + (gpu pass at {c} - gpu pass at {base})"}


def routing_curve(profile: str) -> dict | None:
    """The curve the engine routed (mean over layers), from the profile the gpu setting wrote."""
    if not os.path.exists(profile):
        return None
    import numpy as np
    from make_synthetic import ROUTING_CURVE, routing_curve_of
    with open(profile) as f:
        lines = f.read().split("\n")
    rows = [np.array([float(x) for x in ln.split()]) for ln in lines[2:] if ln.strip()]
    curves = [routing_curve_of(r) for r in rows if r.sum() > 0]
    mean = {n: round(float(np.mean([c[n] for c in curves])), 4) for n in curves[0]} if curves else {}
    return {"measured_mean_over_layers": mean, "target": {n: y for n, y in ROUTING_CURVE if n in mean},
            "layers": len(curves), "calls_per_layer": float(rows[0].sum()) if rows else 0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strata", default=os.path.join(REPO, "build-gpu", "engine", "strata"))
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--contexts", default="1024,4096,32768")
    ap.add_argument("--decode", type=int, default=64, help="tokens per decode measurement")
    ap.add_argument("--warm", type=int, default=8, help="tokens of the warm-up request before the first context")
    ap.add_argument("--chunk", type=int, default=1024, help="prompt chunk (--chunk of the engine)")
    ap.add_argument("--settings", default="gpu,pc12")
    ap.add_argument("--budget-s", type=float, default=170, help="wall time for all settings together")
    ap.add_argument("--backend", default="cuda", help="cpu: a smoke test of this script (gpu setting, no profile)")
    ap.add_argument("--pc12-extra", default="", help="more engine flags for pc12, space-separated")
    ap.add_argument("--mtp", default="", help="an MTP head (make_synthetic.py --mtp-out): settings NAME/mtp run NAME "
                    "with it, drafting 3 tokens a window whatever their probability (--spec 3 --draft-min-p 0); "
                    "NAME/mtpN drafts N (1-3)")
    ap.add_argument("--miss-share", default="0.75", help="STRATA_GPU_MISS_SHARE of the pc12pcie setting "
                    "(pc12pcie:SHARE in --settings names its own)")
    a = ap.parse_args()
    a.contexts = [int(c) for c in a.contexts.split(",")]
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    mb = model_bytes(a.model)
    profile = os.path.join(a.out, "routing.profile")
    res = {"model": os.path.basename(a.model), "model_bytes": mb, "decode_tokens": a.decode, "chunk": a.chunk,
           "inputs": {"W_gpu_hbm": W_HBM, "W_cpu_6_threads": W_CPU_6, "t_handshake_s": T_HANDSHAKE,
                      "source": "PERFORMANCE.md §4.4 (H200 host, measured 2026-11-29); W_cpu interpolated 4->8 threads"},
           "settings": {}}
    settings = a.settings.split(",")
    for i, s in enumerate(settings):
        left = a.budget_s - (time.time() - t0)
        spec, _, rep = s.partition("#")       # gpu#2: a repeat of the gpu setting
        spec, slash, mtp = spec.partition("/")   # gpu/mtp: the gpu setting with the MTP head drafting
        if slash and (mtp not in ("mtp", "mtp1", "mtp2", "mtp3") or not a.mtp):
            ap.error(f"{s!r}: NAME/mtp or NAME/mtpN (N = 1-3) needs --mtp PATH")
        name, *assignments = spec.split("+")  # gpu+STRATA_CUDA_PDL=0: the gpu setting with that variable
        depth = mtp[3:] or "3"
        spec_flags = ["--mtp", a.mtp, "--spec", depth, "--draft-min-p", "0"] if slash else []
        extra_env = dict(x.split("=", 1) for x in assignments)
        base, _, share = name.partition(":")  # pc12pcie:0.9 = pc12pcie with that miss share
        weight = lambda x: BUDGET_WEIGHT.get(x.partition("#")[0].partition("/")[0].partition("+")[0].partition(":")[0], 1)
        deadline = time.time() + left * weight(s) / sum(weight(x) for x in settings[i:])
        if name == "gpu":
            plain = not extra_env and not rep and not slash
            flags = ["--routing-profile-out", profile] if a.backend == "cuda" and plain else []
            res["settings"][s] = measure_setting(a, s, flags + spec_flags, 11, mb, deadline,
                                                 a.contexts if plain else [min(a.contexts)], extra_env or None)
        elif base in ("pc12", "pc12host", "pc12hostjoin", "pc12pcie", "pc12dev", "pc12nostage"):
            flags = PC12_FLAGS + (["--routing-profile", profile] if os.path.exists(profile) else [])
            host = {"STRATA_HYBRID_DEVICE": "0"}
            env = {"pc12": None, "pc12hostjoin": host, "pc12host": {**host, "STRATA_HYBRID_JOIN": "host"},
                   "pc12dev": {"STRATA_GPU_MISS_SHARE": share} if share else None,
                   "pc12nostage": {"STRATA_HYBRID_STAGE": "0"},
                   "pc12pcie": {**host, "STRATA_GPU_MISS_SHARE": share or a.miss_share}}[base]
            env = {"STRATA_SHARE_LOG": "1", **(env or {}), **extra_env}   # the auto share's path, in the log
            res["settings"][s] = measure_setting(a, s, flags + a.pc12_extra.split() + spec_flags, 23, mb, deadline,
                                                 a.contexts if s == "pc12" else [min(a.contexts)], env)
        else:
            ap.error(f"unknown setting {s!r} (gpu, pc12, pc12hostjoin, pc12host, pc12pcie, pc12dev, pc12nostage)")
        if s != "gpu":
            res["settings"][s]["cache_fill"] = "routing profile of the gpu setting" if os.path.exists(profile) \
                else "by expert id (no profile)"
    # The same prompts with and without the MTP head drafting: the verify windows' tokens must be plain greedy's.
    for s, v in res["settings"].items():
        base = res["settings"].get(s.partition("/")[0]) if "/mtp" in s else None
        if base and base.get("warm_tokens") and v.get("warm_tokens"):   # the warm-up's tokens come first
            w0, w1 = base["warm_tokens"], v["warm_tokens"]
            v["warm_equals_plain_greedy"] = {
                "tokens_compared": min(len(w0), len(w1)),
                "first_difference": next((i for i, (x, y) in enumerate(zip(w0, w1)) if x != y), None)}
        for c, row in v.get("contexts", {}).items():
            plain = (base or {}).get("contexts", {}).get(c, {}).get("tokens")
            if plain and row.get("tokens"):
                n = min(len(plain), len(row["tokens"]))
                diff = next((i for i in range(n) if plain[i] != row["tokens"][i]), None)
                row["equals_plain_greedy"] = {"tokens_compared": n, "first_difference": diff}
    res["routing_curve"] = routing_curve(profile)
    derive_missing(res)
    res["wall_s"] = round(time.time() - t0, 1)
    with open(os.path.join(a.out, "decode.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps({s: {c: {k: r.get(k) for k in ("decode_tok_s", "prompt_tok_s", "hit_rate", "skipped")}
                          for c, r in v.get("contexts", {}).items()} for s, v in res["settings"].items()}))
    return 0 if all("error" not in v for v in res["settings"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
