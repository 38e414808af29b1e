#include "model/session.h"

#include "common/error.h"

namespace strata {

Session::Session(Backend& be, const Hparams& hp, int n_ctx) : be_(be), hp_(hp), n_ctx_(n_ctx) {
    STRATA_CHECK(n_ctx > 0, "context length must be positive, got ", n_ctx);
    layers.resize(hp.n_layer);
    for (int il = 0; il < hp.n_layer; ++il) {
        LayerState& s = layers[il];
        if (hp.is_recurrent[il]) {
            s.conv_hist = take((size_t)(hp.ssm_conv_kernel - 1) * hp.conv_dim(), true);
            s.ssm = take((size_t)hp.ssm_n_value_head * hp.ssm_head_dim * hp.ssm_head_dim, true);
        } else {
            const size_t kv = (size_t)hp.n_head_kv * hp.head_dim;
            s.k_cache = take((size_t)n_ctx * kv, false);
            s.v_cache = take((size_t)n_ctx * kv, false);
            const int cr = hp.compress_ratios[il];
            if (cr > 0) {
                s.idx_kraw = take((size_t)n_ctx * hp.indexer_head_dim, false);
                s.idx_kblock = take((size_t)(n_ctx / cr + 1) * hp.indexer_head_dim, false);
            }
        }
        if (il == hp.ple_layer)
            s.ple_hist = take((size_t)(hp.ple_conv_kernel - 1) * hp.ple_ngram * hp.hc_dim(), true);
    }
    reset();
}

Session::~Session() {
    for (auto& b : buffers_) be_.release(b.first);
}

float* Session::take(size_t n, bool recurrent) {
    float* p = be_.alloc(n);
    buffers_.push_back({p, n});
    if (recurrent) recurrent_.push_back({p, n});
    return p;
}

Session::Snapshot Session::snapshot() const {
    Snapshot snap;
    snap.n_tokens = tokens.size();
    snap.rope_pos = rope_pos;
    snap.embd_key = embd_key;
    snap.rope_next = rope_next;
    for (const auto& [p, n] : recurrent_) {
        snap.buffers.emplace_back(n);
        be_.to_host(snap.buffers.back().data(), p, n);
    }
    return snap;
}

void Session::restore(const Snapshot& snap) {
    STRATA_ASSERT(snap.buffers.size() == recurrent_.size() && snap.n_tokens <= tokens.size());
    // (callers restoring a checkpoint set `tokens` to the checkpoint's tokens first)
    for (size_t k = 0; k < recurrent_.size(); ++k) be_.to_device(recurrent_[k].first, snap.buffers[k].data(), recurrent_[k].second);
    tokens.resize(snap.n_tokens);
    STRATA_ASSERT(snap.rope_pos.empty() || (snap.rope_pos.size() == snap.n_tokens && snap.embd_key.size() == snap.n_tokens));
    rope_pos = snap.rope_pos;
    embd_key = snap.embd_key;
    rope_next = snap.rope_next;
}

void Session::begin_multimodal() {
    if (multimodal()) return;
    const int n = n_past();
    rope_pos.resize(n);
    for (int i = 0; i < n; ++i) rope_pos[i] = {i, i, i};
    embd_key.assign(n, 0);
    rope_next = n;
}

void Session::reset() {
    tokens.clear();
    rope_pos.clear();
    embd_key.clear();
    rope_next = 0;
    // Only recurrent state must start at zero; caches are written before they are read.
    for (auto& b : buffers_) be_.fill(b.first, 0.0f, b.second);
}

}  // namespace strata
