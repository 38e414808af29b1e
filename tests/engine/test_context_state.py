"""`strata info` says what a context costs on the device: the session's KV caches, indexer keys and recurrent state
(engine/src/model/session.h, Session::device_floats), the bytes the GPU backend keeps free beside its expert cache for
--ctx (GpuOptions::context_reserve_bytes; before 2026-12-05 they came out of --vram-reserve-mib, which a 12 GB card
at 32K overran). The growth per token must be the attention layers' K, V, raw indexer key and pooled block key in f32:
on the shipped demo model 3 QSA layers x (2 x 1 KV head x 64 + 32 + 32 / 4) floats = 2,016 bytes. (Every Session
also checks at construction that it allocated exactly device_floats, so every engine test covers the two agreeing.)"""
import os
import re
import subprocess

from test_checkpoints import DEMO


def test_info_prints_the_context_state_growing_by_the_kv_bytes_of_a_token(engine_bin):
    r = subprocess.run([engine_bin, "info", DEMO], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    def sizes(kv):
        m = re.search(r"context state .*--kv " + kv + r"\): 4K ([\d.]+) MiB; 32K ([\d.]+) MiB; 128K ([\d.]+) MiB; "
                      r"256K ([\d.]+) MiB;", r.stdout)
        assert m, r.stdout[:2000]
        return list(map(float, m.groups()))
    v4, v32, v128, v256 = sizes("f32")
    h4, h32, h128, h256 = sizes("f16")
    q4, q32, q128, q256 = sizes("q8")
    # --kv f16: K and V in half the bytes (3 layers x 2 x 64 fp16 values a token less), the indexer keys unchanged
    assert abs((v256 - h256) - 256 * 1024 * 3 * 2 * 64 * 2 / 2 ** 20) < 0.15, (v256, h256)
    # --kv q8: a row of 64 int8 values and one fp16 scale, 66 bytes padded to 68, instead of 256
    assert abs((v256 - q256) - 256 * 1024 * 3 * 2 * (256 - 68) / 2 ** 20) < 0.15, (v256, q256)
    assert re.search(r"layers\s+8 \(5 Gated DeltaNet, 3 QSA attention\)", r.stdout)
    assert re.search(r"attention\s+4 heads, 1 KV heads, head dim 64", r.stdout)
    assert re.search(r"QSA indexer\s+2 heads x 32", r.stdout)
    per_token = 3 * (2 * 1 * 64 + 32 + 32 // 4) * 4
    for lo, hi, n in ((v32, v128, 96 * 1024), (v128, v256, 128 * 1024), (v4, v32, 28 * 1024)):
        assert abs((hi - lo) - n * per_token / 2 ** 20) < 0.15, (lo, hi, n)
    assert v4 > 4096 * per_token / 2 ** 20   # plus the recurrent state, which does not grow


def test_info_prints_the_mtp_heads_device_bytes(engine_bin, tiny_models):
    # MtpHead::device_bytes (the expert cache keeps it free with --mtp): the MTP block's tensors (blk.L.*, uploaded
    # whole) plus its one attention layer's f32 K and V of the context.
    m = tiny_models("tiny8")
    trunk, head = m["gguf"]["f32"], m["mtp_ggufs"]["f32"]
    r = subprocess.run([engine_bin, "info", trunk, "--mtp", head], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = re.search(r"MTP head .*: 4K ([\d.]+) MiB; 32K ([\d.]+) MiB;", r.stdout)
    assert got, r.stdout[:2000]
    h = subprocess.run([engine_bin, "info", head], capture_output=True, text=True, timeout=60)
    assert h.returncode == 0, h.stderr
    layers = int(re.search(r"layers\s+(\d+) \(", h.stdout).group(1))
    kv_heads, head_dim = map(int, re.search(r"attention\s+\d+ heads, (\d+) KV heads, head dim (\d+)", h.stdout).groups())
    block = sum(int(line.split()[-1]) for line in h.stdout.splitlines() if line.startswith(f"blk.{layers}."))
    assert block > 0
    for n, printed in ((4096, got.group(1)), (32768, got.group(2))):
        want = block + n * kv_heads * head_dim * 2 * 4
        assert abs(float(printed) - want / 2 ** 20) < 0.06, (n, printed, want)


def test_cpu_backend_refuses_a_context_larger_than_the_ram(engine_bin):
    # The CPU backend's context lives in RAM; Linux would grant a too-large one and the OOM killer would end the engine
    # when it is touched (seen with --ctx 16000000 on the demo model). STRATA_MEM_AVAILABLE_MIB stands in for a PC
    # with 100 MiB free: the demo's 64K context takes ~127 MiB in f32 (refused, naming --kv q8), ~79 in f16 and ~55 in
    # q8 (both run).
    def run(*extra):
        return subprocess.run([engine_bin, "generate", "--model", DEMO, "--prompt-ids", "1,2", "-n", "1", "--ctx",
                               "65536", *extra], capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, STRATA_MEM_AVAILABLE_MIB="100"))
    refused = run()
    assert refused.returncode != 0
    assert "the context of --ctx 65536 tokens needs 126 MiB of RAM, but 100 MiB are available" in refused.stderr
    assert "--kv q8" in refused.stderr
    assert run("--kv", "f16").returncode == 0
    assert run("--kv", "q8").returncode == 0
