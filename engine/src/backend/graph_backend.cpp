// GraphBackend: recording, signatures, replay or capture (graph_backend.h).
#include "backend/graph_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "common/log.h"

namespace strata {

namespace {
// Op codes in signatures (any distinct values).
enum Op : int {
    kToDevice = 1, kFill, kCopy, kEmbed, kMatmul, kRmsNorm, kL2Norm, kUnary, kMul, kAdd, kScale, kAddRow, kMulRow,
    kSliceCols, kConcatCols, kDeinterleave, kMeanRows, kRepeatStreams, kPleGate, kHyperMix, kHyperInject,
    kHyperRead, kCausalConv, kGdnRecurrent, kGdnBlock, kRope, kScatterRows, kPoolKeyBlocks, kAttentionCells,
    kRouteTopk, kMoeExperts, kSharedExpert, kRopeMulti, kMoeWithShared, kArgmaxRows, kHyperInjectRead,
    kSelectCells, kIndexerScores, kWriteKv, kQsaHeads, kSigmoidGate,
};
// Executable graphs kept (least recently used dropped first). The expert-cache path splits a pass into ~49 runs per
// window size, and speculation adds windows of 2 … 4 tokens and the MTP head's passes: a few hundred in use.
constexpr size_t kMaxGraphs = 1024;
constexpr size_t kArenaChunkFloats = size_t(4) << 20;   // 16 MB pieces of the recording arena
}  // namespace

namespace {
int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}
}  // namespace

GraphBackend::GraphBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)), cap_(inner_->graph_capture()) {
    const char* t = std::getenv("STRATA_GRAPH_TIMING");
    timing_.on = t && std::strcmp(t, "1") == 0;
    const char* split = std::getenv("STRATA_GRAPH_SPLIT");
    split_at_ = parse_split(split ? split : "32,192");
}

// "32,192" (or "32:192") -> {32, 192}: increasing op counts; "0" or an empty list: no split.
std::vector<size_t> GraphBackend::parse_split(const std::string& spec) {
    std::vector<size_t> at;
    size_t pos = 0;
    while (pos < spec.size()) {
        size_t end = spec.find_first_of(",:", pos);
        if (end == std::string::npos) end = spec.size();
        const std::string item = spec.substr(pos, end - pos);
        char* rest = nullptr;
        const unsigned long v = std::strtoul(item.c_str(), &rest, 10);
        STRATA_CHECK(!item.empty() && rest && *rest == 0, "STRATA_GRAPH_SPLIT: '", spec,
                     "' is not a list of op counts (e.g. 32,192; 0 for one piece)");
        if (v > 0) {
            STRATA_CHECK(at.empty() || v > at.back(), "STRATA_GRAPH_SPLIT: op counts must increase: '", spec, "'");
            at.push_back(v);
        }
        pos = end + 1;
    }
    return at;
}

GraphBackend::~GraphBackend() {
    if (counts_.captures)
        log_info("graphs", std::to_string(counts_.launches) + " runs replayed, " + std::to_string(counts_.captures) +
                               " captured (" + std::to_string(counts_.unrepeatable) + " not kept), " +
                               std::to_string(counts_.direct_ops) + " ops run directly inside recorded passes");
    try {
        clear_graphs();
        for (const Chunk& c : arena_) inner_->release(c.p);
    } catch (...) {
    }
}

void GraphBackend::clear_graphs() {
    for (auto& [hash, e] : execs_)
        if (e.exec) cap_->destroy(e.exec);
    execs_.clear();
}

void GraphBackend::prepare_weights(const ModelWeights& w) {
    clear_graphs();
    inner_->prepare_weights(w);
}

void GraphBackend::prepare_weights_extra(const LayerWeights& block, const NextnWeights& nextn) {
    clear_graphs();
    inner_->prepare_weights_extra(block, nextn);
}

std::vector<std::pair<std::string, std::string>> GraphBackend::info() const { return inner_->info(); }

bool GraphBackend::begin_graph() {
    if (!cap_) return inner_->begin_graph();
    if (recording_) return false;
    inner_->begin_graph();     // the inner backend's own bookkeeping (the CUDA profile's pass); it records nothing
    recording_ = true;
    piece_ = pass_ops_ = 0;
    arena_chunk_ = arena_used_ = 0;     // the last pass's scratch is dead by now
    if (timing_.on) {
        timing_.begin_ns = now_ns();
        timing_.first_of_pass = true;
    }
    return true;
}

void GraphBackend::end_graph() {
    if (!recording_) return;
    recording_ = false;
    flush();
}

void GraphBackend::flush_recorded() {
    if (recording_) flush();   // the same piece boundary every pass, so its graphs repeat
}

void GraphBackend::sign(const Weight& w) {
    sign((const void*)&w);
    sign((const void*)w.data);
}

void GraphBackend::sign(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    sig_.add(bits);
}

void GraphBackend::sign(const GdnShape& s) {
    for (int v : {s.nk, s.nv, s.d, s.conv_kernel}) sign(v);
    sign(s.rms_eps);
}

template <class... A>
void GraphBackend::record(int code, std::function<void()> issue, const A&... args) {
    if (!recording_) {
        issue();
        return;
    }
    sig_.add((uint64_t)code);
    (sign(args), ...);
    ops_.push_back(std::move(issue));
    if (piece_ < split_at_.size() && ++pass_ops_ == split_at_[piece_]) {
        ++piece_;
        flush();   // this piece runs while the host records the next
    }
}

void GraphBackend::direct(const std::function<void()>& issue) {
    if (recording_) {
        flush();
        ++counts_.direct_ops;
    }
    issue();
}

float* GraphBackend::alloc(size_t n) {
    if (!recording_) return inner_->alloc(n);
    n = (std::max<size_t>(n, 1) + 63) / 64 * 64;     // 256-byte steps
    while (arena_chunk_ < arena_.size() && arena_used_ + n > arena_[arena_chunk_].n) {
        ++arena_chunk_;
        arena_used_ = 0;
    }
    if (arena_chunk_ == arena_.size()) arena_.push_back(Chunk{inner_->alloc(std::max(n, kArenaChunkFloats)), std::max(n, kArenaChunkFloats)});
    float* p = arena_[arena_chunk_].p + arena_used_;
    arena_used_ += n;
    return p;
}

bool GraphBackend::in_arena(const float* p) const {
    for (const Chunk& c : arena_)
        if (p >= c.p && p < c.p + c.n) return true;
    return false;
}

void GraphBackend::release(float* p) {
    if (in_arena(p)) return;
    if (recording_) released_.push_back(p);
    else inner_->release(p);
}

void GraphBackend::give_back(float* p) {
    if (!in_arena(p)) inner_->release(p);
}

void GraphBackend::flush() {
    struct Reset {     // the recorded run is gone however flush leaves; its released memory goes back after it
        GraphBackend& g;
        ~Reset() {
            g.ops_.clear();
            g.sig_.clear();
            g.upload_bytes_.clear();
            g.uploads_.clear();
            for (float* p : g.released_) g.give_back(p);
            g.released_.clear();
        }
    } reset{*this};
    if (ops_.empty()) return;
    if (timing_.on) flush_start_ns_ = now_ns();
    ++uses_;
    Entry* hit = nullptr;
    auto range = execs_.equal_range(sig_.hash);
    for (auto it = range.first; it != range.second && !hit; ++it)
        if (it->second.words == sig_.words) hit = &it->second;
    if (hit) {
        hit->last_use = uses_;
        std::vector<GraphCapture::Upload> ups;
        ups.reserve(uploads_.size());
        for (const auto& [off, n] : uploads_) ups.push_back({upload_bytes_.data() + off, n});
        ++counts_.launches;
        const int64_t t_lookup = timing_.on ? now_ns() : 0;
        if (hit->exec && cap_->launch(hit->exec, ups)) {
            if (timing_.on) note_timing(t_lookup, now_ns());
            return;
        }
        for (auto& op : ops_) op();     // an unrepeatable run, or a backend that keeps no graphs
        return;
    }
    size_t slot_bytes = 0;     // the uploads' pinned slots, each rounded as GraphCapture's slots are
    for (const auto& [off, n] : uploads_) slot_bytes += (n + 63) / 64 * 64;
    cap_->capture_begin(slot_bytes);
    try {
        for (auto& op : ops_) op();
    } catch (...) {
        if (GraphCapture::Exec e = cap_->capture_end()) cap_->destroy(e);
        throw;
    }
    GraphCapture::Exec exec = cap_->capture_end();
    ++counts_.captures;
    if (!exec) ++counts_.unrepeatable;
    if (execs_.size() >= kMaxGraphs) {
        auto oldest = execs_.begin();
        for (auto it = execs_.begin(); it != execs_.end(); ++it)
            if (it->second.last_use < oldest->second.last_use) oldest = it;
        if (oldest->second.exec) cap_->destroy(oldest->second.exec);
        execs_.erase(oldest);
    }
    execs_.emplace(sig_.hash, Entry{sig_.words, exec, uses_});
    if (timing_.on) timing_.begin_ns = recording_ ? now_ns() : 0;   // a capture's time is not recording time
}

void GraphBackend::note_timing(int64_t t_lookup, int64_t t_launched) {
    Timing& t = timing_;
    if (t.begin_ns) {   // 0: a run flushed outside a recorded pass
        t.record_us += (double)(flush_start_ns_ - t.begin_ns) / 1e3;
        t.lookup_us += (double)(t_lookup - flush_start_ns_) / 1e3;
        t.launch_us += (double)(t_launched - t_lookup) / 1e3;
        t.ops += (int64_t)ops_.size();
        ++t.runs;
        if (t.first_of_pass) {
            t.first_record_us += (double)(flush_start_ns_ - t.begin_ns) / 1e3;
            t.first_launch_us += (double)(t_launched - t_lookup) / 1e3;
            ++t.firsts;
        }
    }
    t.first_of_pass = false;
    t.begin_ns = recording_ ? t_launched : 0;   // the next piece of this pass records from here
    if (t.runs < 256) return;
    char line[320];
    std::snprintf(line, sizeof line,
                  "host µs a replayed run (mean of %lld; a pass is %zu runs): recording %.1f, lookup %.1f, launch call "
                  "%.1f; %.0f ops a run; a pass's first run: recording %.1f, launch call %.1f",
                  (long long)t.runs, split_at_.size() + 1, t.record_us / t.runs, t.lookup_us / t.runs,
                  t.launch_us / t.runs, (double)t.ops / t.runs, t.firsts ? t.first_record_us / t.firsts : 0.0,
                  t.firsts ? t.first_launch_us / t.firsts : 0.0);
    log_info("graphs", line);
    t = Timing{true, t.begin_ns};
}

// ---- ops ----

void GraphBackend::to_device(float* dst, const float* host, size_t n) {
    if (!recording_ || !n) {
        inner_->to_device(dst, host, n);
        return;
    }
    const size_t off = upload_bytes_.size(), bytes = n * sizeof(float);
    upload_bytes_.resize(off + bytes);
    if (bytes) std::memcpy(upload_bytes_.data() + off, host, bytes);
    uploads_.push_back({off, bytes});
    record(kToDevice, [this, dst, off, n] { inner_->to_device(dst, reinterpret_cast<const float*>(upload_bytes_.data() + off), n); },
           (const void*)dst, n);
}

void GraphBackend::to_host(float* host, const float* src, size_t n) {
    direct([&] { inner_->to_host(host, src, n); });
}

void GraphBackend::fill(float* x, float value, size_t n) {
    record(kFill, [=, this] { inner_->fill(x, value, n); }, (const void*)x, value, n);
}

void GraphBackend::copy(float* dst, const float* src, size_t n) {
    record(kCopy, [=, this] { inner_->copy(dst, src, n); }, (const void*)dst, (const void*)src, n);
}

void GraphBackend::argmax_rows(const float* x, int rows, int n, int32_t* out) {
    record(kArgmaxRows, [=, this] { inner_->argmax_rows(x, rows, n, out); }, (const void*)x, rows, n, (const void*)out);
}

void GraphBackend::embed(const Weight& table, const int32_t* ids, int T, float* y) {
    record(kEmbed, [=, this, &table] { inner_->embed(table, ids, T, y); }, table, (const void*)ids, T, (const void*)y);
}

void GraphBackend::matmul(const Weight& w, const float* x, int T, float* y) {
    record(kMatmul, [=, this, &w] { inner_->matmul(w, x, T, y); }, w, (const void*)x, T, (const void*)y);
}

void GraphBackend::rms_norm(const float* x, const Weight* w, int rows, int width, int group, float eps, float* y) {
    record(kRmsNorm, [=, this] { inner_->rms_norm(x, w, rows, width, group, eps, y); }, (const void*)x, (const void*)w, rows,
           width, group, eps, (const void*)y);
}

void GraphBackend::l2_norm(const float* x, int rows, int width, int group, float eps, float scale, float* y) {
    record(kL2Norm, [=, this] { inner_->l2_norm(x, rows, width, group, eps, scale, y); }, (const void*)x, rows, width, group,
           eps, scale, (const void*)y);
}

void GraphBackend::unary(Unary f, const float* x, size_t n, float scale, float* y) {
    record(kUnary, [=, this] { inner_->unary(f, x, n, scale, y); }, f, (const void*)x, n, scale, (const void*)y);
}

void GraphBackend::mul(const float* a, const float* b, size_t n, float* y) {
    record(kMul, [=, this] { inner_->mul(a, b, n, y); }, (const void*)a, (const void*)b, n, (const void*)y);
}

void GraphBackend::add(float* y, const float* x, size_t n) {
    record(kAdd, [=, this] { inner_->add(y, x, n); }, (const void*)y, (const void*)x, n);
}

void GraphBackend::scale(float* x, size_t n, float s) {
    record(kScale, [=, this] { inner_->scale(x, n, s); }, (const void*)x, n, s);
}

void GraphBackend::add_row(float* x, int T, int width, const Weight& v) {
    record(kAddRow, [=, this, &v] { inner_->add_row(x, T, width, v); }, (const void*)x, T, width, v);
}

void GraphBackend::mul_row(float* x, int T, int width, const Weight& v) {
    record(kMulRow, [=, this, &v] { inner_->mul_row(x, T, width, v); }, (const void*)x, T, width, v);
}

void GraphBackend::slice_cols(const float* x, int T, int width, int c0, int nc, float* y) {
    record(kSliceCols, [=, this] { inner_->slice_cols(x, T, width, c0, nc, y); }, (const void*)x, T, width, c0, nc,
           (const void*)y);
}

void GraphBackend::concat_cols(const float* a, const float* b, int rows, int wa, int wb, float* y) {
    record(kConcatCols, [=, this] { inner_->concat_cols(a, b, rows, wa, wb, y); }, (const void*)a, (const void*)b, rows, wa,
           wb, (const void*)y);
}

void GraphBackend::deinterleave(const float* x, int T, int n_heads, int la, int lb, float* a, float* b) {
    record(kDeinterleave, [=, this] { inner_->deinterleave(x, T, n_heads, la, lb, a, b); }, (const void*)x, T, n_heads, la,
           lb, (const void*)a, (const void*)b);
}

void GraphBackend::mean_rows(const float* x, int rows, int width, float* y) {
    record(kMeanRows, [=, this] { inner_->mean_rows(x, rows, width, y); }, (const void*)x, rows, width, (const void*)y);
}

void GraphBackend::repeat_streams(const float* e, int T, int n, int H, float* X) {
    record(kRepeatStreams, [=, this] { inner_->repeat_streams(e, T, n, H, X); }, (const void*)e, T, n, H, (const void*)X);
}

void GraphBackend::ple_gate(const float* K, const float* Q, const float* v, int T, int n, int H, float* gv) {
    record(kPleGate, [=, this] { inner_->ple_gate(K, Q, v, T, n, H, gv); }, (const void*)K, (const void*)Q, (const void*)v, T,
           n, H, (const void*)gv);
}

void GraphBackend::hyper_mix(const float* xn, const float* m, int T, int n, int H, float* u) {
    record(kHyperMix, [=, this] { inner_->hyper_mix(xn, m, T, n, H, u); }, (const void*)xn, (const void*)m, T, n, H,
           (const void*)u);
}

void GraphBackend::hyper_inject(float* X, const float* inj, const float* y, int T, int n, int H) {
    record(kHyperInject, [=, this] { inner_->hyper_inject(X, inj, y, T, n, H); }, (const void*)X, (const void*)inj,
           (const void*)y, T, n, H);
}

void GraphBackend::hyper_read(const HyperWeights& w, const float* X, int T, int n, int H, float eps, float* u,
                              float* inj) {
    record(kHyperRead, [=, this, &w] { inner_->hyper_read(w, X, T, n, H, eps, u, inj); }, (const void*)&w, (const void*)X, T,
           n, H, eps, (const void*)u, (const void*)inj);
}

void GraphBackend::hyper_inject_read(float* X, const float* inj_prev, const float* y, const HyperWeights& w, int T,
                                     int n, int H, float eps, float* u, float* inj) {
    record(kHyperInjectRead, [=, this, &w] { inner_->hyper_inject_read(X, inj_prev, y, w, T, n, H, eps, u, inj); },
           (const void*)X, (const void*)inj_prev, (const void*)y, (const void*)&w, T, n, H, eps, (const void*)u,
           (const void*)inj);
}

void GraphBackend::causal_conv(const float* x, int T, int C, const Weight& w, int K, int dil, float* hist, float* y) {
    record(kCausalConv, [=, this, &w] { inner_->causal_conv(x, T, C, w, K, dil, hist, y); }, (const void*)x, T, C, w, K, dil,
           (const void*)hist, (const void*)y);
}

void GraphBackend::gdn_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta,
                                 int T, int nk, int nv, int dk, int dv, float* S, float* o) {
    record(kGdnRecurrent, [=, this] { inner_->gdn_recurrent(q, k, v, g, beta, T, nk, nv, dk, dv, S, o); }, (const void*)q,
           (const void*)k, (const void*)v, (const void*)g, (const void*)beta, T, nk, nv, dk, dv, (const void*)S,
           (const void*)o);
}

void GraphBackend::gdn_block(const GdnWeights& w, const GdnShape& s, const float* u, int T, float* conv_hist, float* S,
                             float* y, GdnProjections keep) {
    record(kGdnBlock, [=, this, &w] { inner_->gdn_block(w, s, u, T, conv_hist, S, y, keep); }, (const void*)&w, s,
           (const void*)u, T, (const void*)conv_hist, (const void*)S, (const void*)y, (const void*)keep.proj, keep.tokens,
           keep.record ? 1 : 0);
}

void GraphBackend::rope(float* x, int T, int n_heads, int hd, int n_rot, float theta, const int32_t* pos) {
    record(kRope, [=, this] { inner_->rope(x, T, n_heads, hd, n_rot, theta, pos); }, (const void*)x, T, n_heads, hd, n_rot,
           theta, (const void*)pos);
}

void GraphBackend::rope_multi(float* x, int T, int n_heads, int hd, int n_rot, float theta, const int32_t* pos3,
                              int sec_h, int sec_w) {
    record(kRopeMulti, [=, this] { inner_->rope_multi(x, T, n_heads, hd, n_rot, theta, pos3, sec_h, sec_w); },
           (const void*)x, T, n_heads, hd, n_rot, theta, (const void*)pos3, sec_h, sec_w);
}

void GraphBackend::scatter_rows(float* dst, const float* src, int T, int width, const int32_t* pos) {
    record(kScatterRows, [=, this] { inner_->scatter_rows(dst, src, T, width, pos); }, (const void*)dst, (const void*)src, T,
           width, (const void*)pos);
}

void GraphBackend::write_kv(float* cache, const float* src, int T, int width, const int32_t* pos) {
    record(kWriteKv, [=, this] { inner_->write_kv(cache, src, T, width, pos); }, (const void*)cache, (const void*)src, T,
           width, (const void*)pos);
}

void GraphBackend::qsa_heads(const float* qg, float* q, float* gate, float* k, float* qi, const Weight& q_norm,
                             const Weight& k_norm, const Weight* qi_norm, int T, int nh, int nkv, int hd, int ni, int di,
                             float eps, int n_rot, float theta, const int32_t* pos) {
    record(kQsaHeads,
           [=, this, &q_norm, &k_norm] {
               inner_->qsa_heads(qg, q, gate, k, qi, q_norm, k_norm, qi_norm, T, nh, nkv, hd, ni, di, eps, n_rot, theta,
                                 pos);
           },
           (const void*)qg, (const void*)q, (const void*)gate, (const void*)k, (const void*)qi, q_norm, k_norm,
           (const void*)qi_norm, T, nh, nkv, hd, ni, di, eps, n_rot, theta, (const void*)pos);
}

void GraphBackend::sigmoid_gate(float* o, float* gate, size_t n) {
    record(kSigmoidGate, [=, this] { inner_->sigmoid_gate(o, gate, n); }, (const void*)o, (const void*)gate, n);
}

void GraphBackend::pool_key_blocks(const float* kraw, float* kblock, const int32_t* pos, int T, int cr, int di,
                                   const Weight& norm, float eps, int n_rot, float theta) {
    record(kPoolKeyBlocks, [=, this, &norm] { inner_->pool_key_blocks(kraw, kblock, pos, T, cr, di, norm, eps, n_rot, theta); },
           (const void*)kraw, (const void*)kblock, (const void*)pos, T, cr, di, norm, eps, n_rot, theta);
}

// Host keep-lists: read on the host at the call, so never part of a graph.
void GraphBackend::attention(const float* q, const float* K, const float* V, int T, int nh, int nkv, int hd,
                             const std::vector<std::vector<int32_t>>& keep, float* o) {
    direct([&] { inner_->attention(q, K, V, T, nh, nkv, hd, keep, o); });
}

// Positions in memory: the arguments change only with the score rows' stride (every 256 blocks).
void GraphBackend::select_cells(const float* scores, int stride, int T, const int32_t* pos, int cr, int kb,
                                const int32_t* off, int32_t* cells) {
    record(kSelectCells, [=, this] { inner_->select_cells(scores, stride, T, pos, cr, kb, off, cells); },
           (const void*)scores, stride, T, (const void*)pos, cr, kb, (const void*)off, (const void*)cells);
}

void GraphBackend::attention_cells(const float* q, const float* K, const float* V, int T, int nh, int nkv, int hd,
                                   const int32_t* off, const int32_t* cells, int max_cells, float* o) {
    record(kAttentionCells, [=, this] { inner_->attention_cells(q, K, V, T, nh, nkv, hd, off, cells, max_cells, o); },
           (const void*)q, (const void*)K, (const void*)V, T, nh, nkv, hd, (const void*)off, (const void*)cells,
           max_cells, (const void*)o);
}

void GraphBackend::indexer_scores(const float* q, const float* kb, int T, const int32_t* pos, int cr, int ni, int di,
                                  float scale, float* s, int stride) {
    record(kIndexerScores, [=, this] { inner_->indexer_scores(q, kb, T, pos, cr, ni, di, scale, s, stride); },
           (const void*)q, (const void*)kb, T, (const void*)pos, cr, ni, di, scale, (const void*)s, stride);
}

void GraphBackend::route_topk(const float* logits, int T, int E, int k, int32_t* ids, float* weights) {
    record(kRouteTopk, [=, this] { inner_->route_topk(logits, T, E, k, ids, weights); }, (const void*)logits, T, E, k,
           (const void*)ids, (const void*)weights);
}

void GraphBackend::moe_experts(const MoeWeights& w, const float* x, int T, int k, const int32_t* ids,
                               const float* weights, float* y) {
    moe_direct_ = cap_ && cap_->moe_on_host(T, k);
    if (moe_direct_) {
        direct([&] { inner_->moe_experts(w, x, T, k, ids, weights, y); });
        return;
    }
    record(kMoeExperts, [=, this, &w] { inner_->moe_experts(w, x, T, k, ids, weights, y); }, (const void*)&w, (const void*)x,
           T, k, (const void*)ids, (const void*)weights, (const void*)y);
}

// With the expert cache, the shared expert's product is computed inside moe_experts' wait and only added here, so
// it runs the way the moe_experts before it ran (direct or recorded).
void GraphBackend::shared_expert(const MoeWeights& w, const float* u, int T, float* y) {
    if (moe_direct_) {
        direct([&] { inner_->shared_expert(w, u, T, y); });
        return;
    }
    record(kSharedExpert, [=, this, &w] { inner_->shared_expert(w, u, T, y); }, (const void*)&w, (const void*)u, T,
           (const void*)y);
}

// One op, so that the inner backend may merge the two (a direct run when the routing is read on the host).
void GraphBackend::moe_experts_with_shared(const MoeWeights& w, const float* x, int T, int k, const int32_t* ids,
                                           const float* weights, float* y) {
    moe_direct_ = cap_ && cap_->moe_on_host(T, k);
    if (moe_direct_) {
        direct([&] { inner_->moe_experts_with_shared(w, x, T, k, ids, weights, y); });
        return;
    }
    record(kMoeWithShared, [=, this, &w] { inner_->moe_experts_with_shared(w, x, T, k, ids, weights, y); },
           (const void*)&w, (const void*)x, T, k, (const void*)ids, (const void*)weights, (const void*)y);
}

}  // namespace strata
