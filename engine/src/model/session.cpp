#include "model/session.h"

#include <algorithm>

#include "common/error.h"

namespace strata {

template <class Take>
void Session::for_each_buffer(const Hparams& hp, int n_ctx, KvType kv, int il, LayerState& s, Take&& take) {
    if (hp.is_recurrent[il]) {
        take(s.conv_hist, (size_t)(hp.ssm_conv_kernel - 1) * hp.conv_dim(), true);
        take(s.ssm, (size_t)hp.ssm_n_value_head * hp.ssm_head_dim * hp.ssm_head_dim, true);
    } else {
        const size_t kv_floats = (size_t)n_ctx * kv_row_floats(kv, (size_t)hp.n_head_kv * hp.head_dim);
        take(s.k_cache, kv_floats, false);
        take(s.v_cache, kv_floats, false);
        const int cr = hp.compress_ratios[il];
        if (cr > 0) {
            take(s.idx_kraw, (size_t)n_ctx * hp.indexer_head_dim, false);
            take(s.idx_kblock, (size_t)(n_ctx / cr + 1) * hp.indexer_head_dim, false);
        }
    }
    if (il == hp.ple_layer) take(s.ple_hist, (size_t)(hp.ple_conv_kernel - 1) * hp.ple_ngram * hp.hc_dim(), true);
}

Session::Session(Backend& be, const Hparams& hp, int n_ctx) : be_(be), hp_(hp), n_ctx_(n_ctx) {
    STRATA_CHECK(n_ctx > 0, "context length must be positive, got ", n_ctx);
    layers.resize(hp.n_layer);
    try {
        for (int il = 0; il < hp.n_layer; ++il)
            for_each_buffer(hp, n_ctx, be.kv_type(), il, layers[il],
                            [&](float*& field, size_t n, bool recurrent) { field = take(n, recurrent); });
    } catch (const std::exception& e) {   // out of device memory, most likely: say what the context asked for
        for (auto& b : buffers_) be_.release(b.first);
        buffers_.clear();
        recurrent_.clear();
        const auto mib = [&](KvType t) { return device_floats(hp, n_ctx, t) * sizeof(float) >> 20; };
        const std::string q8 = be.kv_type() == KvType::q8 ? "" : "; --kv q8 " + std::to_string(mib(KvType::q8)) + " MiB";
        fail("the context of ", n_ctx, " tokens needs ", mib(be.kv_type()), " MiB on the ", be.name(),
             " backend (a smaller --ctx takes less", q8, "): ", e.what());
    }
    for (int il = 0; il < hp.n_layer; ++il) {
        if (hp.is_recurrent[il]) continue;
        const LayerState& l = layers[il];
        const size_t kv_width = (size_t)hp.n_head_kv * hp.head_dim;
        STRATA_CHECK(be.kv_type() == KvType::f32 || kv_width % 2 == 0, "session: ", kv_type_name(be.kv_type()),
                     " KV rows of an odd width ", kv_width);
        const size_t row = kv_row_floats(be.kv_type(), kv_width), total = (size_t)n_ctx * row;
        positional_.push_back({l.k_cache, total, row, 1});
        positional_.push_back({l.v_cache, total, row, 1});
        const int cr = hp.compress_ratios[il];
        if (cr > 0) {
            const size_t di = hp.indexer_head_dim;
            positional_.push_back({l.idx_kraw, (size_t)n_ctx * di, di, 1});
            positional_.push_back({l.idx_kblock, (size_t)(n_ctx / cr + 1) * di, di, cr});
        }
    }
    // the GPU backend sizes its expert cache by device_floats before this runs
    STRATA_CHECK(allocated_floats() == device_floats(hp, n_ctx, be.kv_type()), "session: ", allocated_floats(),
                 " floats allocated, device_floats says ", device_floats(hp, n_ctx, be.kv_type()));
    reset();
}

size_t Session::device_floats(const Hparams& hp, int n_ctx, KvType kv) {
    size_t total = 0;
    LayerState unused;
    for (int il = 0; il < hp.n_layer; ++il)
        for_each_buffer(hp, n_ctx, kv, il, unused,
                        [&](float*&, size_t n, bool) { total += std::max<size_t>(n, 1); });
    return total;
}

size_t Session::allocated_floats() const {
    size_t total = 0;
    for (const auto& b : buffers_) total += std::max<size_t>(b.second, 1);
    return total;
}

Session::~Session() {
    for (auto& b : buffers_) be_.release(b.first);
    for (float* p : marked_) be_.release(p);
}

size_t Session::recurrent_floats(const Hparams& hp) {
    size_t total = 0;
    LayerState unused;
    for (int il = 0; il < hp.n_layer; ++il)
        for_each_buffer(hp, 1, KvType::f32, il, unused, [&](float*&, size_t n, bool recurrent) {
            if (recurrent) total += std::max<size_t>(n, 1);
        });
    return total;
}

void Session::mark() {
    if (marked_.empty())
        for (const auto& r : recurrent_) marked_.push_back(be_.alloc(r.second));
    for (size_t k = 0; k < recurrent_.size(); ++k) be_.copy(marked_[k], recurrent_[k].first, recurrent_[k].second);
    marked_host_ = {tokens.size(), rope_pos, embd_key, rope_next};
}

void Session::rollback() {
    STRATA_ASSERT(marked_.size() == recurrent_.size() && marked_host_.n_tokens <= tokens.size());
    for (size_t k = 0; k < recurrent_.size(); ++k) be_.copy(recurrent_[k].first, marked_[k], recurrent_[k].second);
    tokens.resize(marked_host_.n_tokens);
    rope_pos = marked_host_.rope_pos;
    embd_key = marked_host_.embd_key;
    rope_next = marked_host_.rope_next;
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

size_t Session::Rows::bytes() const {
    size_t n = 0;
    for (const auto& b : buffers) n += b.size() * sizeof(float);
    return n;
}

Session::Rows Session::copy_rows(size_t n) const {
    STRATA_CHECK(n <= (size_t)n_ctx_, "session: ", n, " rows of a context of ", n_ctx_);
    Rows rows;
    rows.n_tokens = n;
    for (const Positional& b : positional_) {
        // block keys: the complete blocks and the one being filled
        const size_t r = b.tokens_per_row == 1 ? n : n / b.tokens_per_row + 1;
        rows.buffers.emplace_back(std::min(b.floats, r * b.row_floats));
        if (!rows.buffers.back().empty()) be_.to_host(rows.buffers.back().data(), b.p, rows.buffers.back().size());
    }
    return rows;
}

void Session::restore_rows(const Rows& rows) {
    STRATA_ASSERT(rows.buffers.size() == positional_.size());
    for (size_t k = 0; k < positional_.size(); ++k)
        if (!rows.buffers[k].empty()) be_.to_device(positional_[k].p, rows.buffers[k].data(), rows.buffers[k].size());
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
