"""Parked conversations on the GPU backend (protocol.md §4 RESUME): conversation A, a short side request B, then A's
next turn must resume at A's length and give the tokens of a fresh engine reading the whole prompt; with the MTP
head too. Standard library only (runs on the device). The prompts' ids: tests/gpu/parked_prompts.json, written by
tests/gpu/parked_prompts.py on the demo model's tokenizer.
usage: python3 tests/gpu/parked_parity.py --strata build-gpu/engine/strata [--out FILE] [-- extra engine args]"""
import argparse
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(REPO, "installer", "demo", "strata-demo.gguf")
DEMO_MTP = os.path.join(REPO, "installer", "demo", "strata-demo-mtp.gguf")


def serve(strata, prompts, extra):
    proc = subprocess.Popen([strata, "--serve", "--model", DEMO, "--ctx", "4096", *extra], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = []
    for p in prompts:
        ids = p(out) if callable(p) else p
        proc.stdin.write(f"GEN 24 {','.join(map(str, ids))}\n")
        proc.stdin.flush()
        res = {"prompt": ids, "tokens": []}
        while True:
            line = proc.stdout.readline()
            if not line:
                raise SystemExit("engine ended: " + proc.stderr.read()[-600:])
            if line.startswith("RESUME"):
                res["resume"] = int(line.split()[1])
            elif line.startswith("T "):
                res["tokens"].append(int(line.split()[1]))
            elif line.startswith(("DONE", "ERR")):
                res["end"] = line.strip()
                break
        out.append(res)
    proc.stdin.write("QUIT\n")
    proc.stdin.flush()
    proc.wait(timeout=120)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", required=True)
    ap.add_argument("--out")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    with open(os.path.join(REPO, "tests", "gpu", "parked_prompts.json")) as f:
        p = json.load(f)
    report, ok = [], True
    for name, extra in [("plain", []), ("mtp", ["--mtp", DEMO_MTP])]:
        extra = ["--backend", "cuda", *a.extra, *extra]
        cont = lambda r: r[0]["prompt"] + r[0]["tokens"][:-1] + p["follow_up"]
        first, side, resumed = serve(a.strata, [p["a"], p["b"], cont], extra)
        (fresh,) = serve(a.strata, [resumed["prompt"]], extra)
        want = len(first["prompt"]) + len(first["tokens"]) - 1
        good = resumed.get("resume") == want and resumed["tokens"] == fresh["tokens"]
        ok = ok and good
        report.append({"setting": name, "resume": resumed.get("resume"), "expected_resume": want,
                       "same_tokens_as_fresh": resumed["tokens"] == fresh["tokens"], "ok": good})
        print(f"parked {name}: resume {resumed.get('resume')} (want {want}), tokens "
              f"{'=' if resumed['tokens'] == fresh['tokens'] else '!='} fresh: {'ok' if good else 'FAIL'}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(report, f, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
