"""A prompt chunk's activation memory (Backend::memory_use, the `memory:` line of `strata generate`): it grows
linearly with the chunk, everything is given back after the prompt, and it stays under 5.5 [T, n·H] f32 buffers a
token on the demo model (3.9 since the blocks reuse dead buffers, 2026-12-05; 7.2 before:
bench/results/2026-12-05-vm-prompt-memory). On a small card this is what bounds the chunk size."""
import re
import subprocess

from test_checkpoints import DEMO

LINE = re.compile(r"memory: the prompt's activations and scratch peaked ([\d.]+) MiB above the ([\d.]+) MiB held "
                  r"before it \(chunks of (\d+) tokens\); ([\d.]+) MiB reserved for them after it")


def prompt_memory(engine_bin, chunk: int) -> tuple[float, float, float]:
    ids = ",".join(str((7919 * i + 13) % 2000 + 30) for i in range(256))
    r = subprocess.run([engine_bin, "generate", "--model", DEMO, "--prompt-ids", ids, "-n", "1", "--ignore-eos",
                        "--threads", "2", "--chunk", str(chunk)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-800:]
    m = LINE.search(r.stderr)
    assert m and int(m.group(3)) == chunk, r.stderr[-800:]
    return float(m.group(1)), float(m.group(2)), float(m.group(4))


def test_prompt_memory_is_linear_in_the_chunk_and_given_back(engine_bin):
    info = subprocess.run([engine_bin, "info", DEMO], capture_output=True, text=True, timeout=60).stdout
    h, n = map(int, re.search(r"hidden\s+(\d+) x (\d+) hyper-connection streams", info).groups())
    peaks = {}
    for chunk in (64, 128, 256):
        peak, before, after = prompt_memory(engine_bin, chunk)
        assert after == before > 0       # the session's state stays; every activation is released
        peaks[chunk] = peak
        per_token = peak * 2**20 / chunk / (4 * n * h)   # in [T, n·H] f32 buffers
        assert 3 < per_token < 5.5, (chunk, per_token)
    assert 1.8 < peaks[128] / peaks[64] < 2.2 and 1.8 < peaks[256] / peaks[128] < 2.2, peaks
