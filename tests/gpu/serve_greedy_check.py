"""Greedy decoding through `strata --serve` on the GPU against the CPU, every tiny model: the serve loop's plain greedy
path takes the next token from the backend's argmax op (one id to the host, no logits row), so the GPU's argmax
kernel decides every token. With --f32-activations both backends give the same tokens (tests/gpu/parity.py checks
their logits); the T lines of GEN 48 after a 40-token prompt must be identical.
usage: python3 tests/gpu/serve_greedy_check.py --strata BIN --models DIR"""
import argparse
import glob
import os
import subprocess
import sys

# Both backends' KV format: f32, or STRATA_KV's, whatever the engine's default is.
KV = os.environ.get("STRATA_KV") or "f32"
PROMPT = [12 + 37 * i % 480 for i in range(40)]


def serve_tokens(strata, model, backend, n_new=48):
    p = subprocess.Popen([strata, "--serve", "--backend", backend, "--model", model, "--ctx", "256",
                          "--f32-activations", "--kv", KV], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    tokens, done = [], None
    for line in p.stdout:
        if line.startswith("READY"):
            p.stdin.write(f"GEN {n_new} {','.join(map(str, PROMPT))}\n")
            p.stdin.flush()
        elif line.startswith("T "):
            tokens.append(int(line.split()[1]))
        elif line.startswith(("DONE", "ERR")):
            done = line.strip()
            break
    try:
        p.stdin.write("QUIT\n")
        p.stdin.flush()
    except BrokenPipeError:   # the engine has gone (its exit status says why)
        pass
    rc = p.wait(timeout=60)
    return tokens, done or f"exit {rc}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", required=True)
    ap.add_argument("--models", required=True)
    a = ap.parse_args()
    ok = 0
    # (*-mtp.gguf are MTP heads that load beside a trunk: tests/gpu/prepare_models.py's mtp.json)
    models = sorted(m for m in glob.glob(os.path.join(a.models, "*.gguf")) if not m.endswith("-mtp.gguf"))
    for m in models:
        cpu, cpu_done = serve_tokens(a.strata, m, "cpu")
        gpu, gpu_done = serve_tokens(a.strata, m, "cuda")
        same = bool(cpu) and cpu == gpu
        ok += same
        print(f"{os.path.basename(m):24s} {'ok' if same else 'FAIL'}: {len(gpu)} GPU tokens, {len(cpu)} CPU"
              + ("" if same else f"; cpu {cpu[:12]} ({cpu_done}) gpu {gpu[:12]} ({gpu_done})"))
    print(f"serve greedy: {ok}/{len(models)} models give the CPU's tokens on the GPU")
    return 0 if ok == len(models) else 1


if __name__ == "__main__":
    sys.exit(main())
