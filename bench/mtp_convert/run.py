"""MTP head conversion at the real size: a synthetic BF16 checkpoint with the real model's mtp.* tensors (random
values, 512 experts, ~5.2 GB) converted by engine/tools/mtp_extract.py as the installer does it. Records the wall
time, the converter's peak memory (RSS) and the file sizes in results.json. Fetching is not measured (no Hub here).

    python bench/mtp_convert/run.py --work /tmp/mtp-bench --out bench/results/DIR [--experts 512] [--outtype q8_0,bf16]"""
import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time

# runs mtp_extract.py's CLI and prints the process's own peak RSS (KiB) last
MEASURED = ("import resource, runpy, sys\nsys.argv = sys.argv[1:]\n"
            "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\nexcept SystemExit as e:\n"
            "    assert not e.code, e.code\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "engine", "tools"))
import mtp_extract  # noqa: E402
from gguf_layout import hparams_from_config, real_model_config  # noqa: E402


def write_checkpoint(hf_dir: str, experts: int) -> None:
    """config.json + model.safetensors holding exactly what the MTP GGUF needs, streamed to disk tensor by tensor."""
    os.makedirs(hf_dir, exist_ok=True)
    cfg = dict(real_model_config(), num_experts=experts)
    with open(os.path.join(hf_dir, "config.json"), "w") as f:
        json.dump(cfg, f)
    hp = hparams_from_config(cfg, cfg, has_output=False)
    tensors = [(k, "BF16", s) for k, s in mtp_extract.expected_shapes(hp, fused_experts=False).items()]
    heads = (hp.ple_ngram - 1) * hp.ple_heads_per_ngram
    tensors += [(k, "I64", (n,)) for k, n in zip(mtp_extract.ple_constant_names(hp), (hp.ple_ngram, heads, heads))]
    header, offset = {}, 0
    for key, dtype, shape in tensors:
        nbytes = math.prod(shape) * (2 if dtype == "BF16" else 8)
        header[key] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    rng = __import__("numpy").random.default_rng(0)
    with open(os.path.join(hf_dir, "model.safetensors"), "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for key, dtype, shape in tensors:
            if dtype == "I64":
                f.write((rng.integers(1, 1000, shape[0]).astype("<i8")).tobytes())
            else:
                x = rng.standard_normal(math.prod(shape), dtype="float32") * 0.02
                f.write((x.view("uint32") >> 16).astype("<u2").tobytes())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True, help="folder for the synthetic checkpoint and the output (~8 GB)")
    ap.add_argument("--out", required=True, help="folder for results.json")
    ap.add_argument("--experts", type=int, default=512)
    ap.add_argument("--outtype", default="q8_0,bf16")
    args = ap.parse_args()
    hf_dir = os.path.join(args.work, f"ckpt-{args.experts}")
    if not os.path.exists(os.path.join(hf_dir, "model.safetensors")):
        write_checkpoint(hf_dir, args.experts)
    runs = []
    for outtype in args.outtype.split(","):
        out = os.path.join(args.work, f"mtp-{outtype}.gguf")
        t0 = time.time()
        done = subprocess.run([sys.executable, "-c", MEASURED, os.path.join(REPO, "engine", "tools", "mtp_extract.py"),
                               hf_dir, out, "--outtype", outtype], check=True, capture_output=True, text=True)
        runs.append({"outtype": outtype, "seconds": round(time.time() - t0, 1),
                     "peak_rss_gib": round(int(done.stdout.split()[-1]) / 2**20, 2),
                     "input_gb": round(os.path.getsize(os.path.join(hf_dir, "model.safetensors")) / 1e9, 2),
                     "output_gb": round(os.path.getsize(out) / 1e9, 2)})
        os.remove(out)
        print(json.dumps(runs[-1]), flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"machine": platform.node(), "cpus": os.cpu_count(), "experts": args.experts, "runs": runs}, f,
                  indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
