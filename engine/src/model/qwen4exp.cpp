// Qwen4Exp::forward: the layer loop over Backend ops; a short pass runs as one backend graph where it can.
#include "model/qwen4exp.h"

#include <algorithm>

#include "common/env.h"
#include "common/error.h"
#include "model/blocks.h"

namespace strata {

Qwen4Exp::Qwen4Exp(const std::string& path, Backend& be) : be_(be), file_(GgufFile::open(path)) {
    hp_ = Hparams::from_gguf(*file_);
    w_ = ModelWeights::bind(*file_, hp_);
    for (const LayerWeights& L : w_.layers)
        if (L.has_ple) {
            // The real table (28.8 GB) is read past the page cache, which would otherwise take the RAM the pinned
            // experts need; a small one (tiny and demo models) stays cached. STRATA_PLE_UNBUFFERED=0/1 decides.
            const GgufTensor& t = *L.ple.table;
            const bool unbuffered = env_switch("STRATA_PLE_UNBUFFERED", t.n_bytes >= kUnbufferedPleBytes);
            ple_ = std::make_unique<PleReader>(file_->paths()[t.shard], t.file_offset,
                                               ggml_row_bytes(t.type, hp_.ple_row_width), -1, unbuffered);
        }
    be_.prepare_weights(w_);
}

void Qwen4Exp::forward(Session& s, const int32_t* ids, int T, const Outputs& out, const Media* media) {
    std::vector<int32_t> next_ids;   // announce_next's tokens are for this pass only, whatever happens to it
    next_ids.swap(next_ids_);
    const int n = hp_.hc_count, H = hp_.n_embd, nH = n * H;
    const int P = s.n_past();
    STRATA_CHECK(T > 0, "forward needs at least one token");
    STRATA_CHECK(P + T <= s.n_ctx(), "context overflow: ", P, " + ", T, " tokens exceed the context of ", s.n_ctx());
    for (int t = 0; t < T; ++t)
        STRATA_CHECK(ids[t] >= 0 && ids[t] < hp_.n_vocab, "token id ", ids[t], " is outside the vocabulary of ", hp_.n_vocab);

    const int logit_rows = out.logits || out.argmax ? (out.all_logits ? T : 1) : 0;
    if (out.replay) {
        STRATA_CHECK(T <= out.replay->max_tokens_, "replay: a pass of ", T, " tokens, recorded for ", out.replay->max_tokens_);
        STRATA_CHECK(!media, "replay: a pass with media is not recorded");
        out.replay->tokens_ = T;
        out.replay->rope_next_ = s.multimodal() ? s.rope_next : -1;
    }
    std::vector<int32_t> pos(T);
    for (int t = 0; t < T; ++t) pos[t] = P + t;

    // M-RoPE positions [3, T] when the session holds (or this pass brings) anything but text at its index.
    bool mm = s.multimodal();
    if (media && !mm)
        for (int t = 0; t < T && !mm; ++t) {
            const std::array<int32_t, 3>& p = media->pos ? media->pos[t] : std::array<int32_t, 3>{P + t, P + t, P + t};
            mm = (media->rows && media->rows[t]) || p[0] != P + t || p[1] != P + t || p[2] != P + t;
        }
    std::vector<int32_t> pos3;
    int32_t next = 0;
    if (mm) {
        s.begin_multimodal();
        pos3.resize((size_t)3 * T);
        const int32_t c = s.rope_next;
        for (int t = 0; t < T; ++t)
            for (int a = 0; a < 3; ++a) pos3[(size_t)a * T + t] = media && media->pos ? media->pos[t][a] : c + t;
        next = media && media->pos ? media->next : c + T;
    }
    // The PLE rows of these tokens are read from the file while the backend works on the layers before the PLE layer
    // (or were begun during the last forward, for this context and these tokens: announce_next).
    if (ple_) {
        std::vector<int32_t> context = ple_context(hp_, s.tokens, nullptr, 0);
        const bool ahead = ahead_context_ == context && ahead_ids_.size() == (size_t)T &&
                           std::equal(ids, ids + T, ahead_ids_.begin());
        if (ahead) ++ple_ahead_used_;
        else ple_begin_reads(hp_, *ple_, context, ids, T);
        ahead_ids_.clear();
        ahead_context_.clear();
    }

    // One graph from the embedding to the logits (no value is needed on the host in between); token ids and
    // positions reach the device as data, so one graph serves every step of the same shape. The scratch is taken
    // inside the graph's scope (GraphBackend hands the same addresses to every pass of a shape).
    GraphScope graph(be_, T <= kGraphMaxTokens);
    Scratch X(be_, (size_t)T * nH), u(be_, (size_t)T * H), y(be_, (size_t)T * H),
        inj(be_, (size_t)T * n), logits(be_, std::max<size_t>(1, (size_t)logit_rows * hp_.n_vocab)),
        d_ints(be_, (size_t)3 * T + 1), d_pos3(be_, mm ? (size_t)3 * T : 1), choice(be_, std::max(1, logit_rows));
    // One upload for the pass's ids, positions and the QSA layers' query offsets (each upload is a copy in the
    // device's chain of work): [ids T | pos T | offsets T + 1], the offsets of the first QSA layer's compress ratio.
    int qsa_cr = -1;
    for (int il = 0; il < hp_.n_layer && qsa_cr < 0; ++il)
        if (!w_.layers[il].recurrent) qsa_cr = hp_.compress_ratios[il];
    std::vector<int32_t> pass_ints(ids, ids + T);
    pass_ints.insert(pass_ints.end(), pos.begin(), pos.end());
    if (qsa_cr >= 0) {
        const std::vector<int32_t> off = qsa_query_offsets(hp_, qsa_cr, P, T);
        pass_ints.insert(pass_ints.end(), off.begin(), off.end());
    }
    const int32_t* ids_dev = upload_ints(be_, d_ints, pass_ints);
    const int32_t* pos_dev = ids_dev + T;
    const int32_t* qsa_off_dev = qsa_cr >= 0 ? pos_dev + T : nullptr;
    {
        Scratch e(be_, (size_t)T * H);   // the embeddings: needed only until they fill the streams
        be_.embed(w_.token_embd, ids_dev, T, e);
        if (media && media->rows)   // image rows replace the placeholders' embeddings (runs of consecutive rows)
            for (int t = 0; t < T;) {
                if (!media->rows[t]) { ++t; continue; }
                int k = 1;
                while (t + k < T && media->rows[t + k] == media->rows[t] + (size_t)k * H) ++k;
                be_.to_device(e + (size_t)t * H, media->rows[t], (size_t)k * H);
                t += k;
            }
        be_.repeat_streams(e, T, n, H, X);
    }
    QsaRope mrope;
    if (mm) {
        mrope.pos3 = upload_ints(be_, d_pos3, pos3);
        mrope.host3 = pos3.data();
        mrope.earlier = &s.rope_pos;
        mrope.sec_h = hp_.rope_sections[1];
        mrope.sec_w = hp_.rope_sections[2];
    }

    // Each sub-block's output y goes into the streams (X += inj ⊗ y) as the next hyper read starts
    // (hyper_inject_read: a GPU backend folds the injection into the read); `pending` while it has not.
    bool pending = false;
    for (int il = 0; il < hp_.n_layer; ++il) {
        const LayerWeights& L = w_.layers[il];
        LayerState& st = s.layers[il];
        if (L.has_ple) {
            if (pending) be_.hyper_inject(X, inj, y, T, n, H);
            pending = false;
            be_.flush_recorded();   // the layers so far start on the device while the host waits for the rows
            ple_block(be_, hp_, L.ple, *ple_, st, T, X, out.replay ? out.replay->ple_in_ : nullptr);
            if (!next_ids.empty()) {   // the next forward's rows, read while this one goes on
                ahead_context_ = ple_context(hp_, s.tokens, ids, T);
                ahead_ids_ = next_ids;
                ple_begin_reads(hp_, *ple_, ahead_context_, ahead_ids_.data(), (int)ahead_ids_.size());
            }
        }

        if (pending) hyper_inject_read(be_, hp_, L.hc_attn, X, inj, y, T, u, inj);
        else hyper_read(be_, hp_, L.hc_attn, X, T, u, inj);
        if (L.recurrent)
            gdn_block(be_, hp_, L.gdn, st, u, T, y,
                      out.replay ? Backend::GdnProjections{out.replay->proj_[il], out.replay->max_tokens_, true}
                                 : Backend::GdnProjections{});
        else qsa_block(be_, hp_, L.qsa, st, hp_.compress_ratios[il], u, T, P, pos_dev, y, mm ? &mrope : nullptr,
                       hp_.compress_ratios[il] == qsa_cr ? qsa_off_dev : nullptr);

        hyper_inject_read(be_, hp_, L.hc_ffn, X, inj, y, T, u, inj);
        moe_block(be_, hp_, L.moe, u, T, y);
        pending = true;
    }
    const bool head_folds = pending && logit_rows == T;   // the head reads every row: the last injection folds in
    if (head_folds) hyper_inject_read(be_, hp_, w_.output_hc, X, inj, y, T, u, nullptr);
    else if (pending) be_.hyper_inject(X, inj, y, T, n, H);
    if (logit_rows) {
        const float* X_first = X + (size_t)(T - logit_rows) * nH;
        if (!head_folds) hyper_read(be_, hp_, w_.output_hc, X_first, logit_rows, u, nullptr);
        be_.matmul(w_.output, u, logit_rows, logits);
        if (out.argmax) be_.argmax_rows(logits, logit_rows, hp_.n_vocab, reinterpret_cast<int32_t*>(choice.get()));
    }
    graph.end();
    s.tokens.insert(s.tokens.end(), ids, ids + T);
    if (mm) {
        for (int t = 0; t < T; ++t) {
            s.rope_pos.push_back({pos3[t], pos3[(size_t)T + t], pos3[(size_t)2 * T + t]});
            s.embd_key.push_back(media && media->keys ? media->keys[t] : 0);
        }
        s.rope_next = next;
    }
    if (out.wide) be_.to_host(out.wide, X, (size_t)T * nH);
    if (out.logits) be_.to_host(out.logits, logits, (size_t)logit_rows * hp_.n_vocab);
    if (out.argmax) be_.to_host(reinterpret_cast<float*>(out.argmax), choice, (size_t)logit_rows);
}

Qwen4Exp::Replay::Replay(Backend& be, const Hparams& hp, int max_tokens) : be_(be), max_tokens_(max_tokens) {
    STRATA_CHECK(max_tokens > 0, "replay: ", max_tokens, " tokens");
    proj_.assign(hp.n_layer, nullptr);
    for (int il = 0; il < hp.n_layer; ++il)
        if (hp.is_recurrent[il]) proj_[il] = be.alloc(Backend::gdn_projection_floats(gdn_shape(hp), max_tokens));
    if (hp.ple_layer >= 0) ple_in_ = be.alloc((size_t)max_tokens * hp.hc_dim());
}

Qwen4Exp::Replay::~Replay() {
    for (float* p : proj_)
        if (p) be_.release(p);
    if (ple_in_) be_.release(ple_in_);
}

void Qwen4Exp::replay(Session& s, const int32_t* ids, int n, Replay& r) {
    STRATA_CHECK(n > 0 && n <= r.tokens_, "replay: ", n, " of a recorded pass of ", r.tokens_, " tokens");
    {
        GraphScope graph(be_, n <= kGraphMaxTokens);
        for (int il = 0; il < hp_.n_layer; ++il) {
            const LayerWeights& L = w_.layers[il];
            LayerState& st = s.layers[il];
            if (L.has_ple) ple_advance_history(be_, hp_, L.ple, st, n, r.ple_in_);
            if (L.recurrent)   // the state only, from the kept projections
                gdn_block(be_, hp_, L.gdn, st, nullptr, n, nullptr, Backend::GdnProjections{r.proj_[il], r.max_tokens_, false});
        }
        graph.end();
    }
    s.tokens.insert(s.tokens.end(), ids, ids + n);
    if (r.rope_next_ >= 0) {   // text after media: positions continue the session's (as forward without media)
        for (int t = 0; t < n; ++t) {
            const int32_t p = r.rope_next_ + t;
            s.rope_pos.push_back({p, p, p});
            s.embd_key.push_back(0);
        }
        s.rope_next = r.rope_next_ + n;
    }
    r.tokens_ = 0;
}

}  // namespace strata
