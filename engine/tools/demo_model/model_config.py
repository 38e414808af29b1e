# Configurations of the demo model (shipped) and of a tiny variant used by the tests, as Qwen4ExpTextConfig.
from transformers import Qwen4ExpTextConfig

# Shipped demo model. Sizes chosen so main + MTP GGUF at f16 stay under ~20 MB (see MODEL_CARD.md).
# The indexer gets no gradient (its selection is a boolean mask), so it stays at its random init. v1's budget of 512
# made half of the tool conversations (512-770 tokens) attend to randomly chosen blocks, tool declarations included;
# v2's budget of 2048 keeps attention dense for every demo conversation (training max_len is 1024).
# v3: a third attention layer (0-based layers 3, 5 and 7; v2: 3 and 7) in place of a GDN layer. That is no interval
# pattern, so convert.py writes the GGUF key attention.recurrent_layers, which the engine reads.
ATTENTION_LAYERS = (3, 5, 7)
DEMO = dict(
    hidden_size=256, num_hidden_layers=8, hc_count=4, hc_lowrank=16,
    layer_types=["indexed_attention" if i in ATTENTION_LAYERS else "linear_attention" for i in range(8)],
    num_attention_heads=4, num_key_value_heads=1, head_dim=64,
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=64, linear_value_head_dim=64,
    linear_conv_kernel_dim=4, output_gate_type="sigmoid",
    num_experts=16, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=64,
    norm_topk_prob=True, router_aux_loss_coef=0.01,
    ple_layer_ids=[2], ple_embed_dim=128, ngram_size=3, heads_per_ngram=8, ngram_vocab_size_base=1000,
    split_ngram_parts=1, ple_conv_kernel_size=4,
    indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=32, indexer_budget=2048, indexer_compress_ratio=4,
    max_position_embeddings=4096, rms_norm_eps=1e-6, initializer_range=0.02, tie_word_embeddings=False,
)

# For tests: every feature on, small enough for a fast CPU run; QSA budget small so selection is really sparse.
TINY = dict(DEMO, hidden_size=64, hc_lowrank=8, head_dim=32, linear_key_head_dim=16, linear_value_head_dim=16,
            moe_intermediate_size=16, shared_expert_intermediate_size=16, ple_embed_dim=32, ngram_vocab_size_base=200,
            indexer_head_dim=16, indexer_budget=8)

# The CPU recipe comparison (compare_recipes.py): TINY's sizes with the QSA budget of the recipe under test.
CPU_COMPARE = {k: v for k, v in TINY.items() if k != "indexer_budget"}

PARTIAL_ROTARY_FACTOR = 0.25


def make_config(sizes: dict, vocab_size: int, eos_token_id: int, pad_token_id: int) -> Qwen4ExpTextConfig:
    head_dim = sizes["head_dim"]
    rotary_half = int(head_dim * PARTIAL_ROTARY_FACTOR) // 2
    # interleaved M-RoPE sections over the rotary frequencies (text positions are equal on all three axes)
    section = [rotary_half - 2 * (rotary_half // 3), rotary_half // 3, rotary_half // 3]
    config = Qwen4ExpTextConfig(
        vocab_size=vocab_size, eos_token_id=eos_token_id, pad_token_id=pad_token_id, bos_token_id=None,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": PARTIAL_ROTARY_FACTOR, "mrope_section": section},
        **sizes,
    )
    # convert.py reads partial_rotary_factor at the top level of the config
    config.partial_rotary_factor = PARTIAL_ROTARY_FACTOR
    return config
