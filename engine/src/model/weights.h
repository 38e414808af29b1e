// qwen4exp tensors bound by their GGUF names into per-layer structs, with every shape checked against the
// hyperparameters. A Weight is a view of mapped file data (ggml order: ne[0] is the input dimension).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/ggml_types.h"
#include "gguf/gguf_file.h"
#include "model/hparams.h"

namespace strata {

struct Weight {
    const GgufTensor* tensor = nullptr;
    GgmlType type = GgmlType::F32;
    int64_t ne[4] = {1, 1, 1, 1};
    const uint8_t* data = nullptr;
    size_t row_bytes = 0;           // bytes of one ne[0]-long row
    bool present() const { return tensor != nullptr; }
    int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
    const uint8_t* row(int64_t r) const { return data + (size_t)r * row_bytes; }
    // For 3-D expert tensors: the [ne1, ne0] matrix of expert e.
    const uint8_t* matrix(int64_t e) const { return data + (size_t)e * (size_t)ne[1] * row_bytes; }
};

struct HyperWeights {       // one hyper-connection module (attn, ffn, or the output mixer)
    Weight norm;            // {n*H}, +1 folded
    Weight down;            // {n*H, r}
    Weight up;              // {r, n*H}
    Weight inject;          // {n*H, n}; absent in the output mixer
};

struct GdnWeights {
    Weight qkv;             // {H, conv_dim}
    Weight gate;            // {H, value_dim}  (z)
    Weight beta, alpha;     // {H, nv}
    Weight conv1d;          // {Kc, conv_dim}
    Weight dt_bias;         // {nv}
    Weight a;               // {nv}, already -exp(A_log)
    Weight norm;            // {dv}, not folded
    Weight out;             // {value_dim, H}
};

struct QsaWeights {
    Weight q;               // {H, nh*2*hd}: per head [hd query | hd gate]
    Weight k, v;            // {H, nkv*hd}
    Weight out;             // {nh*hd, H}
    Weight q_norm, k_norm;  // {hd}, +1 folded
    Weight idx_q, idx_k;    // {H, ni*di}, {H, di}
    Weight idx_q_norm, idx_k_norm;  // {di}, +1 folded
};

struct MoeWeights {
    Weight router;          // {H, E}
    Weight gate_exps, up_exps;  // {H, I, E}
    Weight down_exps;       // {I, H, E}
    Weight shexp_gate_inp;  // {H} or {H, 1}
    Weight gate_shexp, up_shexp;  // {H, Is}
    Weight down_shexp;      // {Is, H}
};

struct PleWeights {
    Weight key;             // {Dp, n*H}
    Weight value;           // {Dp, H}
    Weight norm_key, norm_query, norm_conv;  // {n*H}, +1 folded
    Weight conv1d;          // {Kp, n*H}
    const GgufTensor* table = nullptr;       // per_layer_token_embd {row_width, rows}: read by positioned reads
};

struct NextnWeights {       // the MTP block's extra tensors (GGUF.md §2.6)
    Weight eh_proj;         // {2H, H}: [embedding half | hidden half]
    Weight enorm;           // {H}
    Weight hnorm;           // {n*H}
    HyperWeights head;      // hc_head_{norm,down,up}
};

struct LayerWeights {
    bool recurrent = false;
    HyperWeights hc_attn, hc_ffn;
    GdnWeights gdn;
    QsaWeights qsa;
    MoeWeights moe;
    bool has_ple = false;
    PleWeights ple;
};

struct ModelWeights {
    Weight token_embd;      // {H, V}
    Weight output;          // {H, V}; token_embd when absent
    HyperWeights output_hc;
    std::vector<LayerWeights> layers;  // trunk layers, then the MTP block if present
    bool has_nextn = false;
    NextnWeights nextn;

    // Binds every tensor of the model; throws naming the tensor and the expected shape on any mismatch.
    static ModelWeights bind(GgufFile& f, Hparams& hp);
};

// Binds block `il` of a file: a trunk layer, or the MTP block (attention type; its indexer is optional).
LayerWeights bind_layer(GgufFile& f, const Hparams& hp, int il);
// Binds the MTP block's nextn.* tensors (GGUF.md §2.6).
NextnWeights bind_nextn(GgufFile& f, const Hparams& hp, int il);

}  // namespace strata
