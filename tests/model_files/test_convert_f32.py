# The f32 GGUF of every tiny model holds exactly the HF tensors after the GGUF.md §2 transforms, read back with
# gguf-py's GGUFReader and with our own reader (gguf_read.py); the tensor list equals the layout description.
import numpy as np
import pytest
from gguf import GGUFReader

import gguf_layout
from strata_testing import tiny
from gguf_read import GGUFFile
from hf_reference import expected_main

CONFIGS = ["tiny", "tiny8", "wide256", "realvocab"]


@pytest.mark.parametrize("name", CONFIGS)
def test_f32_tensors_equal_transformed_hf(name):
    m = tiny(name)
    expected, _, _ = expected_main(m["hf_dir"])
    ours = GGUFFile(m["gguf"]["f32"])
    assert sorted(ours.tensors) == sorted(expected)
    for tname, want in expected.items():
        assert ours.tensors[tname][1] == "F32", tname
        assert np.array_equal(ours.tensor_f32(tname), want), tname
    if name == "realvocab":
        return  # gguf-py's reader needs ~30 s to parse 248k token strings; the small configs cover it
    reader = GGUFReader(m["gguf"]["f32"])
    got = {t.name: t for t in reader.tensors}
    assert sorted(got) == sorted(expected)
    for tname, want in expected.items():
        t = got[tname]
        assert t.tensor_type.name == "F32", tname
        assert tuple(int(v) for v in t.shape) == tuple(reversed(want.shape)), tname
        assert np.array_equal(np.asarray(t.data).reshape(want.shape), want), tname


@pytest.mark.parametrize("name", CONFIGS)
def test_tensor_list_matches_layout_description(name):
    m = tiny(name)
    text, root = gguf_layout.read_config(m["hf_dir"])
    specs = gguf_layout.main_tensor_specs(gguf_layout.hparams_from_config(text, root))
    f = GGUFFile(m["gguf"]["f32"])
    assert [(n, tuple(ne)) for n, (ne, _, _) in f.tensors.items()] == [(n, tuple(ne)) for n, ne in specs]


def test_value_heads_are_tiled_not_grouped():
    # tiny8 has 3 value heads per key head, as the real model: GGUF head 1 must be HF head 3 (key head 1).
    m = tiny("tiny8")
    from hf_reference import load_hf
    cfg, sd = load_hf(m["hf_dir"])
    f = GGUFFile(m["gguf"]["f32"])
    dv = cfg.linear_value_head_dim
    a_log = sd["model.layers.0.linear_attn.A_log"].numpy()
    ssm_a = f.tensor_f32("blk.0.ssm_a")
    assert np.allclose(ssm_a[1], -np.exp(a_log[3]), rtol=0, atol=0)
    z = sd["model.layers.0.linear_attn.in_proj_z.weight"].numpy()
    gate = f.tensor_f32("blk.0.attn_gate.weight")
    assert np.array_equal(gate[dv:2 * dv], z[3 * dv:4 * dv])
