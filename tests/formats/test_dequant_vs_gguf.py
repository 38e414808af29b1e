# The engine's reference dequantizers (via engine/tests/tool_quant_dequant) equal gguf-py's numpy
# dequantization bit for bit on random blocks; Q2_0, which gguf-py predates, is checked against ref_q2_0 below.
import subprocess

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf import quants

N_BLOCKS = 64

# Byte offsets of the fp16 scales in each block (they must be finite, "sane" values; all other bytes are random).
FP16_SCALE_OFFSETS = {
    T.Q8_0: [0], T.Q4_0: [0], T.Q5_0: [0], T.Q4_1: [0, 2], T.Q5_1: [0, 2],
    T.IQ4_NL: [0], T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2],
    T.Q5_K: [0, 2], T.Q6_K: [208], T.IQ4_XS: [0], T.IQ2_XXS: [0], T.IQ2_XS: [0], T.IQ2_S: [0], T.IQ3_XXS: [0],
    T.IQ3_S: [0],
}
# gguf-py can quantize these: use its output as well as random bytes.
GGUF_QUANTIZABLE = {T.Q8_0, T.Q4_0, T.Q5_0, T.Q4_1, T.Q5_1, T.BF16}
Q2_0_ID, Q2_0_BLOCK, Q2_0_BYTES = 42, 64, 18


def random_scales(rng, n):
    # magnitudes across the fp16 range, both signs, including subnormals and zero
    mags = np.exp2(rng.uniform(-24, 15.9, size=n)).astype(np.float16)
    mags[rng.random(n) < 0.05] = 0
    signs = np.where(rng.random(n) < 0.5, -1, 1).astype(np.float16)
    return (mags * signs).astype(np.float16)


def random_blocks(rng, qtype, offsets, block_bytes):
    raw = rng.integers(0, 256, size=(N_BLOCKS, block_bytes), dtype=np.uint8)
    for off in offsets:
        raw[:, off:off + 2] = random_scales(rng, N_BLOCKS).view(np.uint8).reshape(N_BLOCKS, 2)
    return raw


def run_tool(tool, tmp_path, type_name, raw):
    src, dst = tmp_path / f"{type_name}.bin", tmp_path / f"{type_name}.f32"
    src.write_bytes(raw.tobytes())
    subprocess.run([str(tool), type_name, str(src), str(dst)], check=True)
    return np.fromfile(dst, dtype=np.float32)


def assert_bit_equal(got, want, what):
    want = np.ascontiguousarray(want, dtype=np.float32).ravel()
    assert got.shape == want.shape, f"{what}: {got.shape} values, expected {want.shape}"
    bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert bad.size == 0, f"{what}: {bad.size} values differ, first at {bad[0]}: {got[bad[0]]!r} != {want[bad[0]]!r}"


@pytest.mark.parametrize("qtype", sorted(FP16_SCALE_OFFSETS, key=int), ids=lambda t: t.name)
def test_random_blocks(dequant_tool, tmp_path, qtype):
    rng = np.random.default_rng(int(qtype))
    block, nbytes = GGML_QUANT_SIZES[qtype]
    raw = random_blocks(rng, qtype, FP16_SCALE_OFFSETS[qtype], nbytes)
    want = quants.dequantize(raw, qtype)
    assert_bit_equal(run_tool(dequant_tool, tmp_path, qtype.name, raw), want, qtype.name)


@pytest.mark.parametrize("qtype", sorted(GGUF_QUANTIZABLE, key=int), ids=lambda t: t.name)
def test_gguf_quantized_blocks(dequant_tool, tmp_path, qtype):
    rng = np.random.default_rng(100 + int(qtype))
    block, _ = GGML_QUANT_SIZES[qtype]
    x = (rng.standard_normal((4, 8 * block)) * np.exp2(rng.uniform(-10, 10, size=(4, 1)))).astype(np.float32)
    raw = quants.quantize(x, qtype)
    want = quants.dequantize(raw, qtype)
    assert_bit_equal(run_tool(dequant_tool, tmp_path, qtype.name, raw), want, qtype.name)


@pytest.mark.parametrize("name,dtype", [("F32", np.float32), ("F16", np.float16)])
def test_plain_floats(dequant_tool, tmp_path, name, dtype):
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2 ** (8 * np.dtype(dtype).itemsize), size=4096, dtype=np.uint64)
    raw = bits.astype({np.float32: np.uint32, np.float16: np.uint16}[dtype]).view(dtype)
    raw = raw[np.isfinite(raw)]   # NaN payloads are not compared bit for bit
    qtype = T.F32 if name == "F32" else T.F16
    want = quants.dequantize(raw.view(np.uint8), qtype)
    assert_bit_equal(run_tool(dequant_tool, tmp_path, name, raw.view(np.uint8)), want, name)


def test_bf16_random_bits(dequant_tool, tmp_path):
    rng = np.random.default_rng(8)
    raw = rng.integers(0, 2 ** 16, size=4096, dtype=np.uint32).astype(np.uint16)
    want = quants.dequantize(raw.view(np.uint8).reshape(-1, 2), T.BF16)
    assert_bit_equal(run_tool(dequant_tool, tmp_path, "BF16", raw.view(np.uint8)), want, "BF16")


def ref_q2_0(raw: np.ndarray) -> np.ndarray:
    """Q2_0 from its definition (GGUF.md §4.1): fp16 d, 16 bytes of 2-bit codes, weight j = (code_j - 1) * d."""
    blocks = raw.reshape(-1, Q2_0_BYTES)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)          # (nb, 1)
    qs = blocks[:, 2:]                                                     # (nb, 16)
    j = np.arange(Q2_0_BLOCK)
    codes = (qs[:, j // 4] >> (2 * (j % 4)).astype(np.uint8)) & 3          # (nb, 64)
    return ((codes.astype(np.int8) - 1).astype(np.float32) * d).ravel()


def test_q2_0_against_definition(dequant_tool, tmp_path):
    rng = np.random.default_rng(42)
    raw = random_blocks(rng, None, [0], Q2_0_BYTES)
    raw[0, 2:] = 0xFF                      # code 3 (+2d) everywhere: legal, though the reference quantizer never writes it
    raw[1, 2:] = 0x00                      # code 0 (-d) everywhere
    got = run_tool(dequant_tool, tmp_path, "Q2_0", raw)
    assert_bit_equal(got, ref_q2_0(raw), "Q2_0")
    d0 = np.float32(raw[0, :2].copy().view(np.float16)[0])
    assert np.all(got[:64] == 2 * d0)
