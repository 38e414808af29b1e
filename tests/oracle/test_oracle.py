"""The engine (CPU) against transformers' qwen4_exp: greedy tokens and logits of tiny random models, chunked prompts
and thread counts giving bit-identical logits, quantized variants, and negative checks showing the comparison fails
when the model is computed wrongly."""
import os
import random
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from strata_testing import run_generate  # noqa: E402
from transformers_oracle import hf_greedy, load_hf  # noqa: E402

CONFIGS = ["tiny", "tiny8", "wide256", "realvocab"]
N_NEW = 48
REL_TOL = 1e-4            # max |Δ| / max |logit| per generated position


def prompts_for(config: dict, vocab: int) -> dict[str, list[int]]:
    """Three prompts: short; ~150 tokens so QSA selection is active; one with EOS inside so PLE segments reset."""
    rng = random.Random(1234)
    eos = config["eos_token_id"]
    short = [rng.randrange(vocab) for _ in range(7)]
    long = [rng.randrange(vocab) for _ in range(150)]
    with_eos = [rng.randrange(vocab) for _ in range(60)]
    for p in (5, 6, 31, 59):
        with_eos[p] = eos
    return {"short": short, "long150": long, "eos_inside": with_eos}


def engine_logits(engine, gguf, prompt, n, tmp_path, *extra):
    out = str(tmp_path / f"logits-{len(prompt)}-{'_'.join(extra) or 'default'}.bin")
    tokens = run_generate(engine, gguf, prompt, n, *extra, logits_out=out)
    return tokens, np.fromfile(out, dtype=np.float32)


def max_rel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a - b).max(axis=1) / np.abs(b).max(axis=1)


@pytest.fixture(scope="module")
def hf_cache():
    return {}


def hf_run(hf_cache, manifest, prompt, n):
    key = (manifest["hf_dir"], tuple(prompt), n)
    if key not in hf_cache:
        model = hf_cache.setdefault(manifest["hf_dir"], load_hf(manifest["hf_dir"]))
        hf_cache[key] = hf_greedy(model, prompt, n)
    return hf_cache[key]


@pytest.mark.parametrize("config", CONFIGS)
def test_engine_equals_transformers(engine_bin, tiny_models, hf_cache, tmp_path, config):
    m = tiny_models(config)
    model = hf_cache.setdefault(m["hf_dir"], load_hf(m["hf_dir"]))
    vocab = model.config.vocab_size
    for name, prompt in prompts_for(model.config.to_dict(), vocab).items():
        hf_tokens, hf_logits = hf_run(hf_cache, m, prompt, N_NEW)
        tokens, flat = engine_logits(engine_bin, m["gguf"]["f32"], prompt, N_NEW, tmp_path)
        logits = flat.reshape(-1, vocab)
        rel = max_rel(logits, hf_logits)
        print(f"{config}/{name}: max rel {rel.max():.2e}")
        assert tokens == hf_tokens, f"{config}/{name}: greedy tokens differ\n hf     {hf_tokens}\n engine {tokens}"
        worst = int(rel.argmax())
        assert rel.max() <= REL_TOL, (f"{config}/{name}: logits differ by {rel.max():.3e} (relative) at generated "
                                      f"position {worst}; engine {logits[worst][:6]} hf {hf_logits[worst][:6]}")


@pytest.mark.parametrize("config", ["tiny", "tiny8"])
def test_chunked_prompt_and_threads_bit_identical(engine_bin, tiny_models, tmp_path, config):
    m = tiny_models(config)
    prompt = prompts_for({"eos_token_id": 0}, 500)["long150"]
    _, whole = engine_logits(engine_bin, m["gguf"]["f32"], prompt, 8, tmp_path, "--chunk", "4096", "--threads", "1")
    for chunk in ("1", "2", "7"):
        _, part = engine_logits(engine_bin, m["gguf"]["f32"], prompt, 8, tmp_path, "--chunk", chunk, "--threads", "1")
        assert np.array_equal(part, whole), f"{config}: chunk {chunk} changed the logits"
    _, two = engine_logits(engine_bin, m["gguf"]["f32"], prompt, 8, tmp_path, "--chunk", "4096", "--threads", "2")
    assert np.array_equal(two, whole), f"{config}: 2 threads changed the logits"


@pytest.mark.parametrize("outtype", ["f16", "bf16", "q8_0", "q2_0", "iq2_xs"])
def test_quantized_variants_track_f32(engine_bin, tiny_models, tmp_path, outtype):
    """Not exact by nature: report how often the greedy token of each step equals the f32 model's, teacher-forced
    on the f32 continuation, and require finite logits everywhere."""
    m = tiny_models("tiny8")
    prompt = prompts_for({"eos_token_id": 0}, 500)["long150"]
    f32_tokens, _ = engine_logits(engine_bin, m["gguf"]["f32"], prompt, 24, tmp_path)
    # teacher forcing: one step per prefix of the f32 continuation
    agree = 0
    path = str(tmp_path / "q.bin")
    for i in range(len(f32_tokens)):
        tok = run_generate(engine_bin, m["gguf"][outtype], prompt + f32_tokens[:i], 1, logits_out=path)
        assert np.isfinite(np.fromfile(path, dtype=np.float32)).all(), f"{outtype}: non-finite logits"
        agree += tok[0] == f32_tokens[i]
    rate = agree / len(f32_tokens)
    print(f"{outtype}: next-token agreement with f32 {agree}/{len(f32_tokens)} = {rate:.0%}")
    # 2-bit formats of random (untrained) weights keep little of the function: those are reported, not bounded.
    floor = {"f16": 0.9, "bf16": 0.75, "q8_0": 0.75, "q2_0": 0.0, "iq2_xs": 0.0}[outtype]
    assert rate >= floor, f"{outtype}: agreement {rate:.0%} below {floor:.0%}"


@pytest.mark.parametrize("config,outtype", [("tiny8", t) for t in ("f16", "bf16", "q8_0", "q2_0", "iq2_xs")]
                         + [("wide256", "iq2_xs"), ("wide256", "q2_0")])
def test_quantized_weights_equal_transformers(engine_bin, tiny_models, tmp_path, config, outtype):
    """Weight decoding through the whole model: the engine on a quantized GGUF with f32 activations equals
    transformers running the same (dequantized) weights."""
    import gguf_to_hf
    m = tiny_models(config)
    model = load_hf(m["hf_dir"])
    model.load_state_dict(gguf_to_hf.hf_state_dict(m["gguf"][outtype], m["hf_dir"]), strict=True)
    vocab = model.config.vocab_size
    prompt = prompts_for(model.config.to_dict(), vocab)["long150"]
    hf_tokens, hf_logits = hf_greedy(model, prompt, 24)
    tokens, flat = engine_logits(engine_bin, m["gguf"][outtype], prompt, 24, tmp_path, "--f32-activations")
    rel = max_rel(flat.reshape(-1, vocab), hf_logits)
    print(f"{config}/{outtype}: max rel {rel.max():.2e}")
    assert tokens == hf_tokens, f"{config}/{outtype}: greedy tokens differ"
    assert rel.max() <= REL_TOL, f"{config}/{outtype}: logits differ by {rel.max():.3e}"


def test_parity_check_fails_for_silu_gate(engine_bin, tiny_models, tmp_path):
    """transformers with a silu GDN output gate (the engine computes sigmoid, as the GGUF implies) must disagree."""
    import torch
    from transformers import Qwen4ExpForCausalLM
    m = tiny_models("tiny")
    model = Qwen4ExpForCausalLM.from_pretrained(m["hf_dir"], dtype=torch.float32, output_gate_type="silu").eval()
    prompt = prompts_for(model.config.to_dict(), model.config.vocab_size)["long150"]
    hf_tokens, hf_logits = hf_greedy(model, prompt, 8)
    tokens, flat = engine_logits(engine_bin, m["gguf"]["f32"], prompt, 8, tmp_path)
    rel = max_rel(flat.reshape(-1, model.config.vocab_size), hf_logits)
    assert rel.max() > REL_TOL * 10, "a silu gate went unnoticed: the parity test cannot fail"


def test_parity_check_fails_for_hf_head_pairing(engine_bin, tiny_models, hf_cache, tmp_path, monkeypatch):
    """A GGUF written without the tiled V-head reorder (HF pairing) must disagree with transformers."""
    import convert
    m = tiny_models("tiny8")     # 3 value heads per key head: the orders really differ
    monkeypatch.setattr(convert, "tile_heads", lambda x, nk, nv, axis=0: x)
    bad = str(tmp_path / "hf-pairing.gguf")
    convert.convert(m["hf_dir"], bad, "f32", None, name="hf-pairing")
    model = hf_cache.setdefault(m["hf_dir"], load_hf(m["hf_dir"]))
    prompt = prompts_for(model.config.to_dict(), model.config.vocab_size)["long150"]
    _, hf_logits = hf_run(hf_cache, m, prompt, 8)
    _, flat = engine_logits(engine_bin, bad, prompt, 8, tmp_path)
    rel = max_rel(flat.reshape(-1, model.config.vocab_size), hf_logits)
    assert rel.max() > REL_TOL * 10, "HF head pairing went unnoticed: the parity test cannot fail"
