// One conversation's state on the backend's device: GDN conv histories and fp32 recurrent states, KV caches,
// indexer raw keys and pooled block keys, the PLE conv history and n-gram context. Sized once from n_ctx.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/hparams.h"

namespace strata {

struct LayerState {
    float* conv_hist = nullptr;   // GDN: [(Kc-1), conv_dim] previous raw qkv rows, oldest first
    float* ssm = nullptr;         // GDN: [nv, dk, dv] fp32 recurrent state
    float* k_cache = nullptr;     // QSA: [n_ctx, nkv·hd] keys after norm and RoPE (Backend::kv_type's format)
    float* v_cache = nullptr;     // QSA: [n_ctx, nkv·hd] (as k_cache)
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
    // The floats a Session of this shape takes on its backend's device (the KV caches and indexer keys grow with
    // n_ctx; kv: the K and V caches' format, backend/kv_format.h): what the GPU backend keeps free beside its expert
    // cache (GpuOptions::context_reserve_bytes).
    static size_t device_floats(const Hparams& hp, int n_ctx, KvType kv = KvType::f32);
    size_t allocated_floats() const;

    // The recurrent part of the state (GDN conv + ssm, PLE history, the token list), copied to the host. KV caches,
    // indexer keys and block keys are positional: entries past the restored length are rewritten before use.
    struct Snapshot {
        std::vector<std::vector<float>> buffers;
        size_t n_tokens = 0;
        std::vector<std::array<int32_t, 3>> rope_pos;   // the multimodal record at that point (see below)
        std::vector<uint64_t> embd_key;
        int32_t rope_next = 0;
    };
    Snapshot snapshot() const;
    void restore(const Snapshot& snap);

    // A rollback point on the backend's own device, for a verify window whose drafts may be rejected: the recurrent
    // buffers copied device to device into a second set (allocated at the first mark: recurrent_floats() more floats
    // on the device, which the GPU backend's reserve counts when speculation is on), and the token list's length.
    // A host Snapshot of the published shape moves ~115 MB over PCIe each way; this copy takes ~0.1 ms on a GPU.
    void mark();
    void rollback();          // back to the last mark (tokens and the multimodal record too)
    static size_t recurrent_floats(const Hparams& hp);

    // The positional buffers' rows of the first n tokens (KV caches, indexer raw keys, block keys), copied to the host.
    // With a Snapshot taken at n it is everything a conversation of n tokens needs to go on after another one used
    // the session (a parked conversation).
    struct Rows {
        std::vector<std::vector<float>> buffers;
        size_t n_tokens = 0;
        size_t bytes() const;
    };
    Rows copy_rows(size_t n) const;
    void restore_rows(const Rows& rows);
    int n_past() const { return (int)tokens.size(); }
    int n_ctx() const { return n_ctx_; }

    std::vector<int32_t> tokens;          // every token the state has seen

    // The multimodal record (MODEL.md §16), kept only while the session holds a token read with other rope positions
    // than (i, i, i) for its index i or with an embedding row instead of its id's (an image): then one entry per token
    // of `tokens`; empty otherwise, and the text-only passes (rope at the index) run as they always did.
    std::vector<std::array<int32_t, 3>> rope_pos;   // (t, h, w) M-RoPE positions
    std::vector<uint64_t> embd_key;                 // 0: read by its id; else the key of the embedding row read
                                                    // (≥ 2^63; prefix matching compares it instead of the id)
    int32_t rope_next = 0;                          // the position of a text token after these (when multimodal)
    bool multimodal() const { return !rope_pos.empty(); }
    int32_t next_position() const { return multimodal() ? rope_next : n_past(); }
    // Starts the record for the tokens held so far (all text at their index).
    void begin_multimodal();
    std::vector<LayerState> layers;       // one per trunk block

private:
    // Calls take(field, floats, recurrent) for every buffer of layer il, in allocation order (the constructor and
    // device_floats share it, so the two cannot disagree).
    template <class Take>
    static void for_each_buffer(const Hparams& hp, int n_ctx, KvType kv, int il, LayerState& s, Take&& take);
    float* take(size_t n, bool recurrent);
    Backend& be_;
    const Hparams& hp_;
    int n_ctx_;
    std::vector<std::pair<float*, size_t>> buffers_;
    std::vector<std::pair<float*, size_t>> recurrent_;   // the subset a snapshot copies
    std::vector<float*> marked_;                          // mark()'s copies of recurrent_, on the device
    struct MarkedHost {
        size_t n_tokens = 0;
        std::vector<std::array<int32_t, 3>> rope_pos;
        std::vector<uint64_t> embd_key;
        int32_t rope_next = 0;
    } marked_host_;
    struct Positional {
        float* p;
        size_t floats;           // the whole buffer
        size_t row_floats;       // one row
        int tokens_per_row;      // 1, or the compress ratio of block keys
    };
    std::vector<Positional> positional_;   // what copy_rows copies
};

}  // namespace strata
