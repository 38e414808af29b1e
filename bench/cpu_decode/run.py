"""CPU decode benchmark on the synthetic full-size model (engine/tools/make_synthetic.py): decode tokens/s and
routed-expert bytes/s of `strata generate` at given thread counts, plus the machine's DRAM read bandwidth measured
in the same run (engine/bench quant_dot_bench when built). Writes results.json.

    python bench/cpu_decode/run.py --model SYN.gguf --threads 2,6 --out DIR [--prompt 16] [--decode 32]"""
import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def model_facts(strata: str, model: str) -> dict:
    out = subprocess.run([strata, "info", model], capture_output=True, text=True, check=True).stdout
    layers = int(re.search(r"^layers\s+(\d+)", out, re.M).group(1))
    k = int(re.search(r"MoE\s+\d+ experts, top (\d+)", out).group(1))
    per_expert = [int(m.group(2)) for m in re.finditer(r"^\s+blk\.(\d+)\s+\d+\s+(\d+)$", out, re.M)]
    types = sorted(set(re.findall(r"^blk\.\d+\.ffn_(?:gate|up|down)_exps\.weight\s+(\S+)", out, re.M)))
    return {"layers": layers, "experts_per_token": k, "expert_bytes": sum(per_expert) / max(1, len(per_expert)),
            "expert_types": types}


def run_once(strata: str, model: str, threads: int, prompt: int, decode: int, isa: str | None,
             backend: str = "cpu") -> dict:
    ids = ",".join(str(100 + 37 * i) for i in range(prompt))
    t0 = time.time()
    r = subprocess.run([strata, "generate", "--model", model, "--prompt-ids", ids, "-n", str(decode), "--ignore-eos",
                        "--threads", str(threads), "--ctx", str(prompt + decode + 8), "--backend", backend],
                       capture_output=True, text=True, check=True,
                       env={**os.environ, **({"STRATA_ISA": isa} if isa else {})})
    m = re.search(r"prompt: (\d+) tokens in ([\d.]+) s .*decode: (\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s\)", r.stderr)
    return {"threads": threads, "prompt_tokens": int(m.group(1)), "prompt_s": float(m.group(2)),
            "decode_tokens": int(m.group(3)), "decode_s": float(m.group(4)), "decode_tok_s": float(m.group(5)),
            "wall_s": round(time.time() - t0, 2)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--strata", default=os.path.join(REPO, "build", "engine", "strata"))
    ap.add_argument("--threads", default="2")
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--out", required=True)
    ap.add_argument("--backend", default="cpu", help="cpu, or cuda for the all-on-GPU reference number")
    ap.add_argument("--isa", default=None, help="STRATA_ISA for the engine: avx2 stands in for a desktop without AVX-512")
    a = ap.parse_args()
    facts = model_facts(a.strata, a.model)
    # Warm the page cache so the run measures DRAM, not the disk.
    with open(a.model, "rb") as f:
        while f.read(1 << 26):
            pass
    results = []
    for t in [int(x) for x in a.threads.split(",")]:
        r = run_once(a.strata, a.model, t, a.prompt, a.decode, a.isa, a.backend)
        r["backend"] = a.backend
        r["isa"] = a.isa or "best (AVX-512 where present; never AMX)"
        bytes_per_token = facts["expert_bytes"] * facts["experts_per_token"] * facts["layers"]
        r["routed_expert_GB_per_token"] = round(bytes_per_token / 1e9, 3)
        r["routed_expert_GB_s"] = round(bytes_per_token * r["decode_tok_s"] / 1e9, 2)
        results.append(r)
        print(json.dumps(r), flush=True)
    os.makedirs(a.out, exist_ok=True)
    doc = {"machine": {"platform": platform.platform(), "cpu": cpu_name(), "cores": os.cpu_count()},
           "model": os.path.basename(a.model), "model_facts": facts, "results": results,
           "command": " ".join(sys.argv)}
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(doc, f, indent=1)
    return 0


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
