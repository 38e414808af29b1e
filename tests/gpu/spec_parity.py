"""Speculation on the GPU gives plain greedy's tokens: for every tiny model with an MTP head (mtp.json of
tests/gpu/prepare_models.py; the demo model's trained head, whose drafts are often accepted, beside it) `strata generate --backend cuda --f32-activations` plain, with the head drafting
(`--mtp --spec 3`), and with it drafting 3 tokens a window whatever their probability (`--draft-min-p 0`: most
windows end in a rejection, so the rollback (Session::mark / rollback) and the replay of the accepted tokens
(Qwen4Exp::replay) run on almost every step); for every model, prompt-lookup drafts (`--spec-lookup 3`) on a
prompt that repeats itself. Tokens must equal the plain run's; the drafts offered and accepted are recorded.
usage: python3 tests/gpu/spec_parity.py --strata BIN --models DIR --out results.json [--backend cuda]"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parity import PROMPT, manifest_of, model_args  # noqa: E402

REPEATING = [(i * 53 + 7) % 300 + 5 for i in range(24)] * 3


def run(strata, model, backend, prompt, extra, n=48):
    cmd = [strata, "generate", "--model", model, "--backend", backend, "--prompt-ids", ",".join(map(str, prompt)),
           "-n", str(n), "--ignore-eos", "--f32-activations", "--ctx", "512"] + extra
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return {"ok": False, "error": p.stderr.strip()[-1500:]}
    m = re.search(r"speculation: (\d+) passes, (\d+) drafts offered, (\d+) accepted", p.stderr)
    return {"ok": True, "tokens": [int(t) for t in p.stdout.strip().splitlines()[-1].split(",") if t],
            "passes": int(m.group(1)) if m else None, "offered": int(m.group(2)) if m else 0,
            "accepted": int(m.group(3)) if m else 0}


def main(argv=None) -> int:
    ap = model_args(__doc__)   # (its --tokens and --tol are not used here: 48 tokens, equal tokens required)
    ap.add_argument("--backend", default="cuda")
    a = ap.parse_args(argv)
    manifest = manifest_of(a.models)
    heads = {}
    if os.path.exists(os.path.join(a.models, "mtp.json")):
        with open(os.path.join(a.models, "mtp.json")) as f:
            heads = json.load(f)
    results, failed = [], 0
    for config, files in manifest.items():
        for outtype, fn in files.items():
            model = os.path.join(a.models, fn)
            cases = [("lookup", REPEATING, ["--spec-lookup", "3"])]
            head = os.path.join(a.models, heads[fn]) if fn in heads else None
            beside = os.path.join(a.models, fn[:-len(".gguf")] + "-mtp.gguf")
            if head is None and config == "demo" and os.path.exists(beside):
                head = beside   # the trained demo model's head: its drafts are often accepted
            if head:
                cases += [("mtp", PROMPT, ["--mtp", head, "--spec", "3"]),
                          ("mtp_always", PROMPT, ["--mtp", head, "--spec", "3", "--draft-min-p", "0"])]
            plain = {}
            for name, prompt, extra in cases:
                key = tuple(prompt)
                if key not in plain:
                    plain[key] = run(a.strata, model, a.backend, prompt, [])
                base, spec = plain[key], run(a.strata, model, a.backend, prompt, extra)
                ok = base["ok"] and spec["ok"] and base["tokens"] == spec["tokens"]
                diff = None
                if base["ok"] and spec["ok"] and not ok:
                    diff = next((i for i, (x, y) in enumerate(zip(base["tokens"], spec["tokens"])) if x != y), None)
                failed += not ok
                r = {"model": fn, "case": name, "ok": ok, "first_difference": diff,
                     "offered": spec.get("offered"), "accepted": spec.get("accepted"), "passes": spec.get("passes"),
                     "errors": [x["error"] for x in (base, spec) if not x["ok"]]}
                results.append(r)
                print(f"{fn:24s} {name:10s} {'ok' if ok else 'DIFFER'}: drafts {r['offered']} offered, "
                      f"{r['accepted']} accepted{'' if diff is None else f', first difference at {diff}'}"
                      + (f"  {r['errors']}" if r["errors"] else ""), flush=True)
    with open(a.out, "w") as f:
        json.dump({"backend": a.backend, "results": results, "failed": failed}, f, indent=1)
    print(f"speculation parity ({a.backend}): {len(results) - failed}/{len(results)} runs give plain greedy's tokens")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
