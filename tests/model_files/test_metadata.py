# Metadata keys, value types and values as GGUF.md §1 and §3 say, for the main and the MTP file.
import pytest
from gguf import GGUFReader, GGUFValueType

import tiny_configs
from strata_testing import tiny
from gguf_read import GGUFFile
from hf_reference import expected_main, hf_config_json

A = "qwen4exp"


def expected_fields(name: str, file_type: int, mtp: bool) -> dict:
    """{key: (type, element type, value)} written from GGUF.md §1 and the tiny config."""
    cfg, _, _ = tiny_configs.CONFIGS[name]
    L = cfg["num_hidden_layers"]
    ratios = [cfg["indexer_compress_ratio"] if (i + 1) % 4 == 0 else 0 for i in range(L)] + ([0] if mtp else [])
    u32 = lambda v: ("UINT32", None, v)  # noqa: E731
    sections = cfg["rope_parameters"]["mrope_section"] + [0]
    f = {
        "general.architecture": ("STRING", None, A),
        "general.file_type": u32(file_type), "general.quantization_version": u32(2),
        "general.sampling.temp": ("FLOAT32", None, 1.0), "general.sampling.top_p": ("FLOAT32", None, 0.95),
        "general.sampling.top_k": ("INT32", None, 20),
        f"{A}.block_count": u32(L + (1 if mtp else 0)),
        f"{A}.context_length": u32(cfg["max_position_embeddings"]),
        f"{A}.embedding_length": u32(cfg["hidden_size"]),
        f"{A}.attention.head_count": u32(cfg["num_attention_heads"]),
        f"{A}.attention.head_count_kv": u32(cfg["num_key_value_heads"]),
        f"{A}.attention.key_length": u32(cfg["head_dim"]), f"{A}.attention.value_length": u32(cfg["head_dim"]),
        f"{A}.attention.layer_norm_rms_epsilon": ("FLOAT32", None, cfg["rms_norm_eps"]),
        f"{A}.rope.freq_base": ("FLOAT32", None, cfg["rope_parameters"]["rope_theta"]),
        f"{A}.rope.dimension_count": u32(int(cfg["head_dim"] * cfg["partial_rotary_factor"])),
        f"{A}.rope.dimension_sections": ("ARRAY", "INT32", sections),
        f"{A}.expert_count": u32(cfg["num_experts"]), f"{A}.expert_used_count": u32(cfg["num_experts_per_tok"]),
        f"{A}.expert_feed_forward_length": u32(cfg["moe_intermediate_size"]),
        f"{A}.expert_shared_feed_forward_length": u32(cfg["shared_expert_intermediate_size"]),
        f"{A}.ssm.conv_kernel": u32(cfg["linear_conv_kernel_dim"]),
        f"{A}.ssm.state_size": u32(cfg["linear_key_head_dim"]),
        f"{A}.ssm.group_count": u32(cfg["linear_num_key_heads"]),
        f"{A}.ssm.time_step_rank": u32(cfg["linear_num_value_heads"]),
        f"{A}.ssm.inner_size": u32(cfg["linear_value_head_dim"] * cfg["linear_num_value_heads"]),
        f"{A}.full_attention_interval": u32(4),
        f"{A}.hyper_connection.count": u32(cfg["hc_count"]), f"{A}.hyper_connection.low_rank": u32(cfg["hc_lowrank"]),
        f"{A}.attention.indexer.head_count": u32(cfg["indexer_n_heads"]),
        f"{A}.attention.indexer.key_length": u32(cfg["indexer_head_dim"]),
        f"{A}.attention.indexer.top_k": u32(cfg["indexer_budget"]),
        f"{A}.attention.compress_ratios": ("ARRAY", "INT32", ratios),
        f"{A}.ple.layers": ("ARRAY", "INT32", [cfg["ple_layer_ids"][0] - 1]),
        f"{A}.ple.ngram_size": u32(cfg["ngram_size"]), f"{A}.ple.heads_per_ngram": u32(cfg["heads_per_ngram"]),
        f"{A}.ple.conv_kernel": u32(cfg["ple_conv_kernel_size"]), f"{A}.ple.eos_token_id": u32(cfg["eos_token_id"]),
        f"{A}.ple.image_token_id": u32(cfg["image_token_id"]),
        f"{A}.embedding_length_per_layer_input": u32(cfg["ple_embed_dim"] // 16),
        "tokenizer.ggml.model": ("STRING", None, "gpt2"), "tokenizer.ggml.pre": ("STRING", None, "qwen35"),
        "tokenizer.ggml.add_bos_token": ("BOOL", None, False),
    }
    if mtp:
        f[f"{A}.nextn_predict_layers"] = u32(1)
    return f


@pytest.mark.parametrize("name", ["tiny", "tiny8"])
@pytest.mark.parametrize("outtype,file_type", [("f32", 0), ("f16", 1), ("bf16", 32), ("q8_0", 7), ("q2_0", 41)])
def test_main_file_keys(name, outtype, file_type):
    m = tiny(name)
    f = GGUFFile(m["gguf"][outtype])
    want = expected_fields(name, file_type, mtp=False)
    for key, (t, et, v) in want.items():
        assert key in f.fields, key
        got_v, got_t, got_et = f.fields[key]
        assert (got_t, got_et) == (t, et), key
        if t == "FLOAT32":
            assert got_v == pytest.approx(v, rel=1e-6), key
        else:
            assert got_v == v, key
    assert f"{A}.nextn_predict_layers" not in f.fields
    assert f"{A}.feed_forward_length" not in f.fields


def test_ple_constants_are_uint64_copies_of_the_buffers():
    m = tiny("tiny")
    _, consts, _ = expected_main(m["hf_dir"])
    f = GGUFFile(m["gguf"]["f32"])
    for key in ("layer_multipliers", "head_offsets", "head_vocab_sizes"):
        v, t, et = f.fields[f"{A}.ple.{key}"]
        assert (t, et) == ("ARRAY", "UINT64")
        assert v == consts[key]
    # independent check of the stored multipliers against MODEL.md §6.1's test vector for the real vocabulary
    real = GGUFFile(tiny("realvocab")["gguf"]["q2_0"])
    assert real.value(f"{A}.ple.layer_multipliers") == [23703573157769, 20109073645365, 8052911324071]


def test_gguf_py_reads_the_same_types():
    m = tiny("tiny")
    r = GGUFReader(m["gguf"]["f32"])
    f = GGUFFile(m["gguf"]["f32"])
    for key, (_, t, et) in f.fields.items():
        types = [GGUFValueType(x).name for x in r.fields[key].types]
        assert types[0] == t, key
        if et:
            assert types[1] == et, key


def test_mtp_file_keys():
    m = tiny("tiny")
    f = GGUFFile(m["mtp_gguf"])
    for key, (t, et, v) in expected_fields("tiny", 0, mtp=True).items():
        assert f.fields[key][1:] == (t, et), key
        if t != "FLOAT32":
            assert f.fields[key][0] == v, key


@pytest.mark.parametrize("name,eos,pad,im_start", [
    ("tiny", tiny_configs.SMALL_IM_END, tiny_configs.SMALL_ENDOFTEXT, tiny_configs.SMALL_ENDOFTEXT + 1),
    ("realvocab", 248046, 248044, 248045)])
def test_tokenizer_keys(name, eos, pad, im_start):
    m = tiny(name)
    f = GGUFFile(m["gguf"]["q2_0"])
    V = hf_config_json(m["hf_dir"])["vocab_size"]
    tokens, token_types = f.value("tokenizer.ggml.tokens"), f.value("tokenizer.ggml.token_type")
    assert f.fields["tokenizer.ggml.tokens"][1:] == ("ARRAY", "STRING")
    assert f.fields["tokenizer.ggml.token_type"][1:] == ("ARRAY", "INT32")
    assert f.fields["tokenizer.ggml.merges"][1:] == ("ARRAY", "STRING")
    assert len(tokens) == len(token_types) == V
    assert f.value("tokenizer.ggml.eos_token_id") == eos
    assert f.value("tokenizer.ggml.bos_token_id") == pad
    assert f.value("tokenizer.ggml.padding_token_id") == pad
    assert tokens[im_start] == "<|im_start|>" and token_types[im_start] == 3
    assert tokens[eos] == "<|im_end|>" and token_types[eos] == 3
    think = tokens.index("<think>")
    assert token_types[think] == 4                      # user-defined: not special
    assert tokens[198] == "Ċ" and token_types[198] == 1  # "\n" in the byte-level alphabet
    n_real = im_start - 1 + 33
    assert all(tokens[i] == f"[PAD{i}]" and token_types[i] == 5 for i in range(n_real, V))
    template = f.value("tokenizer.chat_template")
    assert "<|im_start|>" in template
    with open(f"{m['hf_dir']}/chat_template.jinja", encoding="utf-8") as t:
        assert template == t.read()
