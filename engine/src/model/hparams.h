// qwen4exp hyperparameters read from GGUF metadata (GGUF.md §1), validated the way llama.cpp's loader does,
// plus the derived sizes the model code uses. Letters: H hidden, n streams, nk/nv GDN key/value heads.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

class GgufFile;

struct Hparams {
    int n_layer = 0;          // trunk layers (block_count minus the MTP block, if any)
    int n_nextn = 0;          // MTP blocks after the trunk (0 or 1)
    int n_vocab = 0;          // rows of token_embd
    int n_embd = 0;           // H
    int n_ctx_train = 0;
    float rms_eps = 1e-6f;

    // attention (QSA) layers
    int n_head = 0, n_head_kv = 0, head_dim = 0;   // head_dim = key_length = value_length
    int n_rot = 0;                                  // rotated dims per head (partial rotary)
    float rope_theta = 10000.0f;
    int rope_sections[4] = {0, 0, 0, 0};
    int indexer_n_head = 0, indexer_head_dim = 0, indexer_top_k = 0;  // top_k in tokens
    std::vector<int> compress_ratios;               // per block (incl. MTP); 0 = dense attention

    // Gated DeltaNet layers
    int ssm_conv_kernel = 0;   // Kc
    int ssm_head_dim = 0;      // dk = dv
    int ssm_n_key_head = 0;    // nk
    int ssm_n_value_head = 0;  // nv
    std::vector<bool> is_recurrent;  // per block

    // MoE
    int n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_ff_shexp = 0;

    // hyper-connections
    int hc_count = 0, hc_low_rank = 0;

    // PLE (at most one layer)
    int ple_layer = -1;                 // 0-based, -1 = none
    int ple_ngram = 0, ple_heads_per_ngram = 0, ple_conv_kernel = 0, ple_row_width = 0;
    uint32_t ple_eos_id = 0, ple_image_id = 0;
    std::vector<uint64_t> ple_multipliers, ple_head_offsets, ple_head_sizes;

    // tokenizer facts the engine needs
    std::vector<int32_t> stop_ids;      // generation stops on these
    int32_t turn_start_id = -1;         // <|im_start|>: conversation checkpoints are taken before the last one
    int32_t image_token_id = -1;        // <|image_pad|> (by name in the vocabulary, else ple.image_token_id): GENI runs

    // derived
    int key_dim() const { return ssm_n_key_head * ssm_head_dim; }
    int value_dim() const { return ssm_n_value_head * ssm_head_dim; }
    int conv_dim() const { return 2 * key_dim() + value_dim(); }
    int hc_dim() const { return hc_count * n_embd; }
    int ple_n_heads() const { return (ple_ngram - 1) * ple_heads_per_ngram; }
    int ple_dim() const { return ple_n_heads() * ple_row_width; }

    static Hparams from_gguf(const GgufFile& f);
    std::string describe() const;   // multi-line summary for `strata info`
};

}  // namespace strata
