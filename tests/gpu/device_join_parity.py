"""The device-driven hybrid join (engine/src/backend/cuda/hybrid_device.h) against the GPU without a cache, with the
default quantized activations (the join only exists there). For every model of a models folder, `strata generate
--backend cuda` over the prompt of parity.py and N greedy tokens:
  gpu         no expert cache: every expert uploaded (the reference)
  cache100    every expert cached, device join: the same decode kernels over matrix tables
  zc0         no slot, every decode miss read zero-copy from pinned host memory (STRATA_GPU_MISS_SHARE=1)
              (both: tokens identical to gpu, logits within --tol; whether they are bit-identical is recorded: the
              prompt's chunk runs the host path's staged kernels)
  zc0pf0      zc0 without the prefetch of predicted misses (STRATA_PREFETCH=0; zc0 has it): every pair runs the same
              decode kernels over the same bytes whether they came from a prefetch slot or a staging slot, so zc0's
              logits must equal zc0pf0's bit for bit; and over all models the prefetch must have served some pairs
              (its summary line), or the check would not have tested it
  zc0dma      zc0 with the prefetch's copy-engine mode (STRATA_PREFETCH_MODE=dma): likewise bit for bit equal to
              zc0pf0, and over all models it must have served pairs too
  (the device join is the engine's default; every run but host30 takes it)
  host30      ~30% cached, moves every 2 passes, the CPU computing the misses, host join (STRATA_HYBRID_DEVICE=0)
  dev30       the same with the device join, no zero-copy (STRATA_GPU_MISS_SHARE=0): tokens identical to host30;
              logits within the envelope of the placements: max(--tol, 1.5 × the gpu-vs-host30 difference). The
              device join lands cache moves only between passes, so a few pairs are cached in one run and on the
              CPU in the other, and the GPU and the CPU round Q8 activations differently (tiny8: ~5e-2 between
              them, recorded by tests/gpu/run.sh's q8act rows; the f32 parity there is the 1e-3 check)
  dev30zc     the same with half the misses zero-copy (STRATA_GPU_MISS_SHARE=0.5): likewise
  dev30auto   the same with the default share (auto: it changes from pass to pass): likewise
              Since these runs round some pairs differently from host30, their greedy tokens may part from host30's
              at a near tie only: where host30's two best logits lie within the envelope (relative to its largest
              |logit|); the logits up to that step must be within it, and the step is recorded.
  host30mtp / dev30mtp  host30 and dev30 with the model's MTP head (mtp.json of prepare_models.py) at --spec 3: verify
              windows of 4 tokens through both joins; dev30mtp's tokens against host30mtp's: identical, or parting
              no earlier than dev30auto's near tie with host30 (the same placements' rounding)
Models whose experts the decode kernels do not take (F32 experts) fall back to the host join and are only recorded.

usage: device_join_parity.py --strata BIN --models DIR --out results.json [--tokens 64] [--tol 1e-3]
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parity import PROMPT, compare, manifest_of, model_args  # noqa: E402

DEV = {"STRATA_HYBRID_DEVICE": "1"}   # the default; named so the runs say which join they take
CACHE = re.compile(r"expert cache: (\d+) slots of (\d+) experts; hits (\d+) of (\d+) look-ups")
PREFETCH = re.compile(r"prefetch: (\d+) predictions, (\d+) experts (?:copied|queued on the copy engine \(\d+ MiB\)), "
                      r"(\d+) (?:dropped or cut short \(the next plan came first\)|layers skipped \([^)]*\)); "
                      r"of (\d+) pairs missed in the cache (\d+) \([^)]*\) were among the candidates and (\d+) \(")


def run(args, model: str, logits: str, extra: list[str], env: dict) -> dict:
    speculative = "--mtp" in extra   # no single-step logits then: tokens only
    cmd = [args.strata, "generate", "--model", model, "--backend", "cuda", "--prompt-ids", ",".join(map(str, PROMPT)),
           "-n", str(args.tokens), "--ignore-eos"] + (["--cpu-workers", "4"] if "--expert-cache" in extra else []) + \
        ([] if speculative else ["--logits-out", logits]) + extra
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, **env})
    out = {"ok": p.returncode == 0, "args": extra, "env": env,
           "device_join": "decode MoE joins on the device" in p.stderr}
    if p.returncode != 0:
        out["error"] = p.stderr.strip()[-1500:]
        return out
    out["tokens"] = [int(t) for t in p.stdout.strip().splitlines()[-1].split(",") if t]
    m = CACHE.search(p.stderr)
    if m:
        out["cache"] = dict(zip(["slots", "experts", "hits", "lookups"], map(int, m.groups())))
    m = PREFETCH.search(p.stderr)
    if m:
        out["prefetch"] = dict(zip(["predictions", "copied", "dropped", "missed", "predicted", "used"],
                                   map(int, m.groups())))
        out["prefetch"]["mode"] = "dma" if "queued on the copy engine" in m.group(0) else "worker"
    if not speculative:
        a = np.fromfile(logits, dtype=np.float32)
        out["logits"] = a.reshape(len(out["tokens"]), a.size // len(out["tokens"]))
    return out


def check_model(args, path: str, tmp: str) -> dict:
    lg = lambda name: os.path.join(tmp, name + ".f32")  # noqa: E731
    ref = run(args, path, lg("gpu"), [], {})
    if not ref["ok"]:
        return {"ok": False, "error": "gpu: " + ref["error"]}
    probe = run(args, path, lg("probe"), ["--expert-cache", "0-slots"], {})
    experts = (probe.get("cache") or {}).get("experts", 0)
    s30 = max(1, round(0.3 * experts))
    runs = {
        "cache100": (["--expert-cache", f"{experts}-slots"], DEV),
        "zc0": (["--expert-cache", "0-slots"], {**DEV, "STRATA_GPU_MISS_SHARE": "1"}),
        "zc0pf0": (["--expert-cache", "0-slots"], {**DEV, "STRATA_GPU_MISS_SHARE": "1", "STRATA_PREFETCH": "0"}),
        "zc0dma": (["--expert-cache", "0-slots"], {**DEV, "STRATA_GPU_MISS_SHARE": "1", "STRATA_PREFETCH_MODE": "dma"}),
        "host30": (["--expert-cache", f"{s30}-slots", "--expert-adapt", "2"], {"STRATA_HYBRID_DEVICE": "0"}),
        "dev30": (["--expert-cache", f"{s30}-slots", "--expert-adapt", "2"], {**DEV, "STRATA_GPU_MISS_SHARE": "0"}),
        "dev30zc": (["--expert-cache", f"{s30}-slots", "--expert-adapt", "2"], {**DEV, "STRATA_GPU_MISS_SHARE": "0.5"}),
        "dev30auto": (["--expert-cache", f"{s30}-slots", "--expert-adapt", "2"], DEV),
    }
    head = args.mtp_heads.get(os.path.basename(path))
    if head:   # speculative verify windows (T = 4 at --spec 3) through both joins
        mtp = ["--mtp", os.path.join(args.models, head), "--spec", "3"]
        runs["host30mtp"] = (runs["host30"][0] + mtp, runs["host30"][1])
        runs["dev30mtp"] = (runs["dev30auto"][0] + mtp, DEV)
    res = {name: run(args, path, lg(name), extra, env) for name, (extra, env) in runs.items()}
    row = {"experts": experts, "slots30": s30, "runs": {}}
    device = all(res[n].get("device_join") for n in ("cache100", "zc0", "dev30", "dev30zc", "dev30auto"))
    row["device_join"] = device
    used = {mode: sum((r.get("prefetch") or {}).get("used", 0) for r in res.values()
                      if (r.get("prefetch") or {}).get("mode") == mode) for mode in ("worker", "dma")}
    row["prefetch_used"], row["prefetch_used_dma"] = used["worker"], used["dma"]
    # The q8-activation rounding between pairs on the GPU and on the CPU: the bound for runs that place pairs
    # differently from their reference.
    envelope = None
    if res["host30"].get("ok") and "logits" in res["host30"]:
        envelope = compare(ref, res["host30"], ref["logits"], res["host30"]["logits"], args.tol)["max_rel_logit_diff"]
        row["gpu_vs_host30_max_rel"] = envelope
    ok = True
    for name, r in res.items():
        if not r["ok"]:
            row["runs"][name] = {"ok": False, "error": r["error"]}
            ok = False
            continue
        base = (ref if name in ("cache100", "zc0", "zc0pf0", "zc0dma") else res["host30mtp"] if name == "dev30mtp"
                else None if name in ("host30", "host30mtp") else res["host30"])
        entry = {"cache": r.get("cache"), "device_join": r["device_join"], "prefetch": r.get("prefetch")}
        if base is not None and base.get("ok") and "logits" not in r:   # speculative: the same tokens
            same = r["tokens"] == base["tokens"]
            fd = next((i for i, (x, y) in enumerate(zip(r["tokens"], base["tokens"])) if x != y), None)
            tie = row["runs"].get("dev30auto", {}).get("near_tie_step")
            entry.update(tokens_identical=same, first_token_diff=fd, against="host30mtp")
            entry["ok"] = (same or (tie is not None and fd is not None and fd >= tie)) if device else True
        elif base is not None and base.get("ok"):
            tol = args.tol
            if name in ("dev30", "dev30zc", "dev30auto") and envelope is not None and np.isfinite(envelope):
                tol = max(args.tol, 1.5 * envelope)
            c = compare(base, r, base["logits"], r["logits"], tol)
            bit = bool(c["tokens_identical"] and r["logits"].shape == base["logits"].shape and
                       np.array_equal(r["logits"], base["logits"]))
            entry.update(tokens_identical=c["tokens_identical"], first_token_diff=c["first_token_diff"],
                         max_rel_logit_diff=c["max_rel_logit_diff"], bit_identical=bit, against=
                         "gpu" if base is ref else "host30mtp" if name == "dev30mtp" else "host30", tol=tol)
            good = c["ok"]
            fd = c["first_token_diff"]
            if name in ("dev30", "dev30zc", "dev30auto") and fd is not None and fd < len(base["logits"]):
                top = np.sort(base["logits"][fd])[-2:]   # host30's two best logits where the tokens part
                margin = float((top[1] - top[0]) / max(float(np.max(np.abs(base["logits"][fd]))), 1e-30))
                entry["margin_at_first_diff"] = margin
                if margin <= tol and np.isfinite(c["max_rel_logit_diff"]) and c["max_rel_logit_diff"] <= tol:
                    entry["near_tie_step"] = fd
                    good = True
            entry["ok"] = good if device else True
        else:
            entry["ok"] = True
        pf0 = res.get("zc0pf0") or {}
        if name in ("zc0", "zc0dma") and device and pf0.get("ok") and "logits" in r and "logits" in pf0:
            same = r["logits"].shape == pf0["logits"].shape and np.array_equal(r["logits"], pf0["logits"])
            entry["bit_identical_to_zc0pf0"] = bool(same)
            entry["ok"] = entry["ok"] and bool(same)
        ok = ok and entry["ok"]
        row["runs"][name] = entry
    row["ok"] = ok
    return row


def main(argv=None) -> int:
    args = model_args(__doc__).parse_args(argv)
    manifest = manifest_of(args.models)
    heads = os.path.join(args.models, "mtp.json")
    args.mtp_heads = json.load(open(heads)) if os.path.exists(heads) else {}
    tmp = tempfile.mkdtemp(prefix="device-join-")
    results, gated = [], 0
    for config, files in manifest.items():
        for outtype, fn in files.items():
            row = check_model(args, os.path.join(args.models, fn), tmp)
            row.update(config=config, outtype=outtype, file=fn)
            results.append(row)
            gated += bool(row.get("device_join"))
            print(f"{config:10s} {outtype:7s} device join {'yes' if row.get('device_join') else 'no (recorded)'}: "
                  f"{'ok' if row['ok'] else 'FAIL'}", flush=True)
            for name, e in (row.get("runs") or {}).items():
                print(f"    {name:9s} {json.dumps(e)}", flush=True)
            if row.get("error"):
                print("  error:", row["error"], flush=True)
    passed = sum(1 for r in results if r["ok"])
    used = sum(r.get("prefetch_used", 0) for r in results)
    used_dma = sum(r.get("prefetch_used_dma", 0) for r in results)
    with open(args.out, "w") as f:
        json.dump({"prompt": PROMPT, "tokens": args.tokens, "tol": args.tol, "models": len(results),
                   "passed": passed, "device_join_models": gated, "prefetch_used_pairs": used,
                   "prefetch_used_pairs_dma": used_dma, "results": results}, f, indent=1)
    print(f"device join parity: {passed}/{len(results)} models pass, {gated} ran the device join; "
          f"{used} pairs ran on prefetched copies (worker), {used_dma} (copy engine)")
    return 0 if passed == len(results) and gated > 0 and used > 0 and used_dma > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
