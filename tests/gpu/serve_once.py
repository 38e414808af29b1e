"""One request through `strata --serve` (CUDA): GEN N_NEW after a prompt of PROMPT_LEN ids; prints the DONE (or ERR)
line. The engine's own stderr (logs, STRATA_CUDA_PROFILE's table at exit) goes to this script's stderr.
usage: python3 tests/gpu/serve_once.py STRATA MODEL PROMPT_LEN [N_NEW]"""
import subprocess
import sys

strata, model, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
n_new = int(sys.argv[4]) if len(sys.argv) > 4 else 64
ids = ",".join(str(100 + (37 * i) % 5000) for i in range(n))
p = subprocess.Popen([strata, "--serve", "--backend", "cuda", "--model", model, "--ctx", str(n + n_new + 64)],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
for line in p.stdout:
    if line.startswith("READY"):
        p.stdin.write(f"GEN {n_new} {ids}\n")
        p.stdin.flush()
    elif line.startswith(("DONE", "ERR")):
        print(line.strip())
        break
p.stdin.write("QUIT\n")
p.stdin.flush()
sys.exit(p.wait())
