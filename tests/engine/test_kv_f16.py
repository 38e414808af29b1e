"""--kv f16 (Backend::set_kv_f16): the attention layers' key and value caches in fp16, half the memory a context takes
on the device. On the shipped demo model the greedy tokens equal the f32 caches' over 40 tokens and the logits stay
within 1e-3 of the largest one (measured 1.8e-4 on 2026-12-05); speculation still gives the plain greedy tokens; the
serve loop runs with it; a bad value is refused with a clear message."""
import subprocess

import numpy as np

from strata_testing import run_generate
from test_checkpoints import DEMO, tokens

PROMPT = ("<|im_start|>user\nName three colours of the rainbow and say which one is between the other two.<|im_end|>\n"
          "<|im_start|>assistant\n<think>\n\n</think>\n\n")


def generate(engine_bin, ids, kv, logits_path):
    r = subprocess.run([engine_bin, "generate", "--model", DEMO, "--prompt-ids", ",".join(map(str, ids)), "-n", "40",
                        "--ignore-eos", "--threads", "2", "--kv", kv, "--logits-out", logits_path],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-800:]
    return [int(t) for t in r.stdout.strip().splitlines()[-1].split(",")], np.fromfile(logits_path, dtype=np.float32)


def test_fp16_kv_caches_give_the_f32_tokens_and_close_logits(engine_bin, tmp_path):
    ids = tokens(PROMPT)
    want, want_logits = generate(engine_bin, ids, "f32", str(tmp_path / "f32.bin"))
    got, got_logits = generate(engine_bin, ids, "f16", str(tmp_path / "f16.bin"))
    assert got == want
    assert got_logits.shape == want_logits.shape and want_logits.size > 0
    rel = float(np.abs(got_logits - want_logits).max() / np.abs(want_logits).max())
    assert 0 < rel < 1e-3, rel   # not bit-identical (the caches are rounded), but close


def test_serve_with_fp16_kv_and_a_bad_value(engine_bin):
    p = subprocess.Popen([engine_bin, "--serve", "--model", DEMO, "--kv", "f16", "--threads", "2"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        p.stdin.write("GEN 4 1,2,3\n")
        p.stdin.flush()
        lines = []
        while not (lines and lines[-1].startswith(("DONE", "ERR"))):
            line = p.stdout.readline()
            assert line, lines
            lines.append(line.strip())
        done = lines[-1].split()
        assert done[0] == "DONE" and int(done[1]) >= 1 and done[2] == "3", lines   # (the demo may stop early)
        p.stdin.write("QUIT\n")
        p.stdin.flush()
        assert p.wait(60) == 0
    finally:
        p.kill()
    bad = subprocess.run([engine_bin, "generate", "--model", DEMO, "--prompt-ids", "1,2", "--kv", "bf16"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "--kv must be f32 or f16, got 'bf16'" in bad.stderr, bad.stderr


def test_fp16_kv_with_speculation_equals_fp16_plain_greedy(engine_bin, tiny_models):
    # The MTP head's own KV cache is fp16 too (the same backend setting): drafts verified against the trunk still give
    # the trunk's greedy tokens with fp16 caches.
    m = tiny_models("tiny8")
    prompt = [int(x) for x in np.random.default_rng(5).integers(0, 500, 60)]
    plain = run_generate(engine_bin, m["gguf"]["f32"], prompt, 40, "--kv", "f16")
    spec = run_generate(engine_bin, m["gguf"]["f32"], prompt, 40, "--kv", "f16", "--mtp", m["mtp_ggufs"]["f32"],
                        "--spec", "3")
    assert spec == plain
