// One conversation's state on the backend's device: GDN conv histories and fp32 recurrent states, KV caches,
// indexer raw keys and pooled block keys, the PLE conv history and n-gram context. Sized once from n_ctx.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/hparams.h"

namespace strata {

struct LayerState {
    float* conv_hist = nullptr;   // GDN: [(Kc-1), conv_dim] previous raw qkv rows, oldest first
    float* ssm = nullptr;         // GDN: [nv, dk, dv] fp32 recurrent state
    float* k_cache = nullptr;     // QSA: [n_ctx, nkv·hd] keys after norm and RoPE
    float* v_cache = nullptr;     // QSA: [n_ctx, nkv·hd]
    float* idx_kraw = nullptr;    // QSA: [n_ctx, di] raw indexer keys (no norm, no RoPE)
    float* idx_kblock = nullptr;  // QSA: [n_ctx / cr, di] pooled, normed, RoPE'd block keys of complete blocks
    float* ple_hist = nullptr;    // PLE: [(Kp-1)·N, n·H] previous gvn rows
};

class Session {
public:
    Session(Backend& be, const Hparams& hp, int n_ctx);
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    void reset();                 // back to the empty state

    // The recurrent part of the state (GDN conv + ssm, PLE history, the token list), copied to the host. KV caches,
    // indexer keys and block keys are positional: entries past the restored length are rewritten before use.
    struct Snapshot {
        std::vector<std::vector<float>> buffers;
        size_t n_tokens = 0;
    };
    Snapshot snapshot() const;
    void restore(const Snapshot& snap);
    int n_past() const { return (int)tokens.size(); }
    int n_ctx() const { return n_ctx_; }

    std::vector<int32_t> tokens;          // every token the state has seen
    std::vector<LayerState> layers;       // one per trunk block

private:
    float* take(size_t n, bool recurrent);
    Backend& be_;
    const Hparams& hp_;
    int n_ctx_;
    std::vector<std::pair<float*, size_t>> buffers_;
    std::vector<std::pair<float*, size_t>> recurrent_;   // the subset a snapshot copies
};

}  // namespace strata
