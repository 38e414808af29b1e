# The MTP GGUF (GGUF.md §2.6) holds the transformed mtp.* weights; the tiny HF checkpoints load in transformers,
# have every weight randomised, and give varied greedy tokens with QSA selection active at ~100 tokens.
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

import tiny_configs
from strata_testing import tiny
from gguf_read import GGUFFile
from hf_reference import expected_mtp


@pytest.mark.parametrize("name", ["tiny", "tiny8"])
def test_mtp_file_tensors(name):
    m = tiny(name)
    want = expected_mtp(m["hf_dir"])
    f = GGUFFile(m["mtp_gguf"])
    L = tiny_configs.CONFIGS[name][0]["num_hidden_layers"]
    assert len(f.tensors) == 34
    assert sorted(f.tensors) == sorted(want)
    for t, x in want.items():
        assert np.array_equal(f.tensor_f32(t), x), t
    assert f.value("qwen4exp.block_count") == L + 1
    assert f.value("qwen4exp.attention.compress_ratios")[-1] == 0
    q8 = GGUFFile(m["mtp_ggufs"]["q8_0"])
    assert q8.tensors[f"blk.{L}.nextn.eh_proj.weight"][1] == "Q8_0"
    assert q8.tensors[f"blk.{L}.nextn.hnorm.weight"][1] == "F32"


@pytest.mark.parametrize("name", list(tiny_configs.CONFIGS))
def test_tiny_checkpoint_is_random_and_varied(name):
    m = tiny(name)
    model = AutoModelForCausalLM.from_pretrained(m["hf_dir"], dtype=torch.float32).eval()
    cfg = model.config
    for pname, p in model.named_parameters():
        assert p.std().item() > 1e-3, f"{pname} is not randomised"
    # QSA: more complete blocks than the block budget at 100 tokens, so selection happens
    assert 100 // cfg.indexer_compress_ratio > cfg.indexer_budget // cfg.indexer_compress_ratio
    ids = torch.randint(0, 400, (1, 100), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(ids).logits[0]
        gen = model.generate(ids[:, :12], max_new_tokens=16, do_sample=False)[0, 12:]
    assert 0.5 < logits.std().item() < 10
    assert len(set(logits.argmax(-1).tolist())) > 20
    assert len(set(gen.tolist())) >= 5, gen.tolist()
