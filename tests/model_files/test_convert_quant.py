# f16/bf16/q8_0/q2_0 files: every tensor has the type of GGUF.md §2.7 / §4 (with the ne0 fallback) and decodes to
# the f32 value within that format's rounding; Q2_0 follows the reference quantizer bit for bit; the iq2_xs file
# has the IQ2_XS mix of random but valid blocks.
import numpy as np
import pytest
import torch

from strata_testing import tiny
from gguf_read import GGUFFile

BLOCK = {"Q8_0": 32, "Q4_0": 32, "Q5_0": 32, "Q5_1": 32, "IQ4_NL": 32, "Q2_0": 64, "Q4_K": 256, "Q6_K": 256,
         "Q5_K": 256, "Q2_K": 256, "IQ2_XS": 256}


def is_f32_tensor(name, ne):
    return (len(ne) == 1 or name.endswith("_norm.weight") or not name.endswith(".weight")
            or any(s in name for s in ("ffn_gate_inp.weight", "ffn_gate_inp_shexp", "ssm_conv1d")))


def fallback(chain, ne0):
    for t in chain:
        if t == "F16" or ne0 % BLOCK[t] == 0:
            return t
    return "F16"


def expected_type(outtype, name, ne):
    if outtype == "f32" or is_f32_tensor(name, ne):
        return "F32"
    if outtype in ("f16", "bf16"):
        return outtype.upper()
    if outtype == "q8_0":
        return fallback(["Q8_0", "F16"], ne[0])
    if "indexer.q_proj" in name or "indexer.k_proj" in name:
        return "BF16"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return fallback(["Q4_K", "Q5_0", "F16"], ne[0])
    if name == "output.weight":
        return fallback(["Q6_K", "Q8_0", "F16"], ne[0])
    return fallback(["Q2_0", "Q4_0", "F16"], ne[0])


# worst-case error as a fraction of the row's max |x|
REL_TOL = {"F16": 1e-3, "BF16": 1 / 128, "Q8_0": 1 / 120, "Q5_0": 1 / 15, "Q4_0": 1 / 7, "Q4_K": 1 / 8,
           "Q6_K": 1 / 30, "Q2_0": 0.51}


@pytest.mark.parametrize("name", ["tiny", "tiny8", "wide256"])
@pytest.mark.parametrize("outtype", ["f16", "bf16", "q8_0", "q2_0"])
def test_types_and_values(name, outtype):
    m = tiny(name)
    ref = GGUFFile(m["gguf"]["f32"])
    f = GGUFFile(m["gguf"][outtype])
    assert list(f.tensors) == list(ref.tensors)
    seen = set()
    for tname, (ne, t, _) in f.tensors.items():
        assert ne == ref.tensors[tname][0], tname
        assert t == expected_type(outtype, tname, ne), tname
        seen.add(t)
        x, y = ref.tensor_f32(tname), f.tensor_f32(tname)
        if t == "F32":
            assert np.array_equal(x, y), tname
        elif t == "F16":
            assert np.array_equal(x.astype(np.float16).astype(np.float32), y), tname
        elif t == "BF16":
            assert np.array_equal(torch.from_numpy(x).to(torch.bfloat16).float().numpy(), y), tname
        else:
            rows = x.reshape(-1, ne[0])
            err = np.abs(rows - y.reshape(rows.shape)).max(axis=1)
            assert np.all(err <= REL_TOL[t] * np.abs(rows).max(axis=1) + 1e-7), (tname, t)
    if outtype == "q2_0":
        assert "Q2_0" in seen
    if outtype == "q2_0" and name == "wide256":
        assert {"Q4_K", "Q6_K"} <= seen


def test_q2_0_blocks_follow_the_reference_quantizer():
    m = tiny("tiny8")
    ref = GGUFFile(m["gguf"]["f32"])
    f = GGUFFile(m["gguf"]["q2_0"])
    checked = 0
    for tname, (ne, t, _) in f.tensors.items():
        if t != "Q2_0":
            continue
        x = ref.tensor_f32(tname).reshape(-1, 64)
        raw = np.asarray(f.raw(tname)).reshape(-1, 18)
        d = raw[:, :2].copy().view(np.float16)[:, 0]
        d32 = np.abs(x).max(axis=1)
        assert np.array_equal(d, d32.astype(np.float16)), tname
        codes = np.array([[(raw[b, 2 + j // 4] >> (2 * (j % 4))) & 3 for j in range(64)] for b in range(len(raw))], dtype=np.int64)
        want = np.clip(np.rint(x / d32[:, None]) + 1, 0, 3)
        assert np.array_equal(codes, want), tname
        assert np.array_equal(f.tensor_f32(tname).reshape(-1, 64), (codes - 1) * d.astype(np.float32)[:, None])
        checked += 1
    assert checked > 10


def test_iq2_xs_random_blocks_mix():
    m = tiny("wide256")
    ref = GGUFFile(m["gguf"]["f32"])
    f = GGUFFile(m["gguf"]["iq2_xs"])
    types = {n: t for n, (_, t, _) in f.tensors.items()}
    assert types["blk.0.ffn_gate_exps.weight"] == "IQ2_XS"
    assert types["blk.0.attn_qkv.weight"] == "Q4_K"
    assert types["output.weight"] == "Q5_K"
    assert types["token_embd.weight"] == "Q2_K"
    assert types["blk.0.hc_attn_up.weight"] == "IQ4_NL"       # ne0 = 64: IQ2_XS falls back
    assert types["blk.1.ple_conv1d.weight"] == "F16"          # ne0 = 4
    assert types["blk.3.indexer.q_proj.weight"] == "BF16"
    assert types["blk.0.ssm_conv1d.weight"] == "F32"
    assert {"Q2_K", "IQ2_XS"} <= {types[n] for n in types if "ffn_down" in n}
    for tname, (ne, t, _) in f.tensors.items():
        y = f.tensor_f32(tname)
        assert np.all(np.isfinite(y)), tname
        if t in ("F32", "F16", "BF16"):
            x = ref.tensor_f32(tname)
            assert np.allclose(x, y, rtol=1 / 128, atol=1e-6), tname
        else:
            assert 0.01 < y.std() < 0.2, (tname, y.std())
