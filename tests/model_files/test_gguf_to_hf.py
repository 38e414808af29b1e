# gguf_to_hf inverts the converter: the f32 GGUF gives back transformers' own state dict, and a quantized GGUF
# loads into the HF model (strict) so parity tests can run transformers on exactly the file's weights.
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from strata_testing import tiny
from gguf_to_hf import hf_state_dict


@pytest.mark.parametrize("name", ["tiny", "tiny8"])
def test_f32_round_trip(name):
    m = tiny(name)
    model = AutoModelForCausalLM.from_pretrained(m["hf_dir"], dtype=torch.float32)
    want = model.state_dict()
    got = hf_state_dict(m["gguf"]["f32"], m["hf_dir"])
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        if k.endswith("A_log"):
            assert torch.allclose(got[k], v, rtol=0, atol=1e-6), k      # log(exp(x)) is not exact
        elif "norm" in k and not k.endswith("linear_attn.norm.weight"):
            # (w+1)-1 may differ from w in the last bits, but the 1+w that transformers multiplies by is exact
            assert torch.equal(1 + got[k], 1 + v), k
        else:
            assert torch.equal(got[k], v), k


def test_quantized_weights_load_strictly_and_stay_close():
    m = tiny("tiny8")
    model = AutoModelForCausalLM.from_pretrained(m["hf_dir"], dtype=torch.float32).eval()
    ids = torch.arange(5, 69).reshape(1, -1)
    with torch.no_grad():
        ref = model(ids).logits
        model.load_state_dict(hf_state_dict(m["gguf"]["q8_0"], m["hf_dir"]), strict=True)
        q8 = model(ids).logits
    assert not torch.equal(ref, q8)
    assert (q8 - ref).abs().max() < 0.1 * ref.abs().max()
