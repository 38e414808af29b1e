# Named, seeded qwen4_exp text configs for the tiny test models (make_tiny.py). Each keeps every feature of the
# real model (HC 4 streams, GDN with tiled heads, QSA that selects at ~100 tokens, one PLE layer, MoE top-2, MTP).

SMALL_VOCAB_RANKS = 479          # first BPE ranks of the Qwen3.5 vocabulary; + 33 added tokens = 512 ids
SMALL_ENDOFTEXT = SMALL_VOCAB_RANKS          # <|endoftext|> in the small vocabulary
SMALL_IM_END = SMALL_VOCAB_RANKS + 2         # <|im_end|>
SMALL_IMAGE_PAD = SMALL_VOCAB_RANKS + 12     # <|image_pad|>


def _base(**kw) -> dict:
    cfg = {
        "architectures": ["Qwen4ExpForCausalLM"], "model_type": "qwen4_exp_text",
        "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "hidden_act": "silu",
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                            "mrope_section": [2, 1, 1]},
        "partial_rotary_factor": 0.25,    # top level too: llama.cpp's converter reads only this one
        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
        "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4,
        "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 32, "norm_topk_prob": True,
        "hc_count": 4, "hc_lowrank": 16,
        "indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 16, "indexer_budget": 16,
        "indexer_compress_ratio": 4,
        "ple_layer_ids": [2], "ple_embed_dim": 64, "ngram_size": 3, "heads_per_ngram": 8,
        "ngram_vocab_size_base": 1000, "make_ngram_vocab_size_divisible_by": 128, "split_ngram_parts": 4,
        "ple_conv_kernel_size": 4, "seed": 1234,
        "output_gate_type": "sigmoid", "tie_word_embeddings": False,
        "eos_token_id": SMALL_ENDOFTEXT, "bos_token_id": SMALL_ENDOFTEXT, "pad_token_id": SMALL_ENDOFTEXT,
        "image_token_id": SMALL_IMAGE_PAD,
    }
    cfg.update(kw)
    return cfg


# name -> (text config, vocabulary: "small" | "real", weight seed)
CONFIGS = {
    # The default parity model: 3 GDN layers + 1 QSA layer, PLE on layer 1 (0-based).
    "tiny": (_base(), "small", 1),
    # 8 layers (QSA at 3 and 7), 3 value heads per key head as in the real model, 64-multiples for Q2_0,
    # a 32-wide PLE table row so the table itself gets quantized.
    "tiny8": (_base(hidden_size=128, num_hidden_layers=8, head_dim=64,
                    rope_parameters={"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25,
                                     "mrope_section": [3, 3, 2]},
                    linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=32,
                    linear_value_head_dim=32, num_experts=16, moe_intermediate_size=64,
                    shared_expert_intermediate_size=64, hc_lowrank=64, indexer_n_heads=4, indexer_head_dim=32,
                    indexer_budget=32, ple_embed_dim=512, ngram_vocab_size_base=2000), "small", 2),
    # 256-wide rows so the K-quant and i-quant block formats (256 weights) really appear in the iq2_xs variant.
    "wide256": (_base(hidden_size=256, num_attention_heads=2,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                                       "mrope_section": [3, 3, 2]}, num_key_value_heads=1, head_dim=64,
                      linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=64,
                      linear_value_head_dim=64, moe_intermediate_size=256, shared_expert_intermediate_size=256,
                      hc_lowrank=64, indexer_head_dim=32, ple_embed_dim=512), "small", 3),
    # The real 248,320-row vocabulary and its special ids (PLE EOS 248044, chat EOS 248046).
    "realvocab": (_base(vocab_size=248320, hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
                        head_dim=32, moe_intermediate_size=32, shared_expert_intermediate_size=32,
                        ple_embed_dim=64, eos_token_id=248044, bos_token_id=248044, pad_token_id=248044,
                        image_token_id=248056), "real", 4),
}

DEFAULT_CONFIG = "tiny"
