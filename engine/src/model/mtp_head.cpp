// The MTP head's pass (a short one runs as one backend graph); the head's own weights and one-layer KV state.
#include "model/mtp_head.h"

#include "common/error.h"
#include "model/blocks.h"

namespace strata {

namespace {
// A one-layer attention state: Session with a description that has just the MTP block as layer 0.
Hparams kv_hparams(const Hparams& hp) {
    Hparams kv_hp = hp;
    kv_hp.n_layer = 1;
    kv_hp.is_recurrent = {false};
    kv_hp.compress_ratios = {0};
    kv_hp.ple_layer = -1;
    return kv_hp;
}
}  // namespace

size_t MtpHead::device_bytes(const std::string& path, int n_ctx, KvType kv) {
    std::unique_ptr<GgufFile> f = GgufFile::open(path);
    const Hparams hp = Hparams::from_gguf(*f);
    const std::string block = "blk." + std::to_string(hp.n_layer) + ".";
    size_t bytes = Session::device_floats(kv_hparams(hp), n_ctx, kv) * sizeof(float);
    for (const GgufTensor& t : f->tensors())
        if (t.name.compare(0, block.size(), block) == 0) bytes += t.n_bytes;
    return bytes;
}

MtpHead::MtpHead(const std::string& path, Qwen4Exp& trunk, int n_ctx)
    : trunk_(trunk), path_(path), file_(GgufFile::open(path)), n_ctx_(n_ctx) {
    hp_ = Hparams::from_gguf(*file_);
    const Hparams& t = trunk.hparams();
    if (hp_.n_nextn != 1) fail(path, ": not an MTP file (nextn_predict_layers is ", hp_.n_nextn, ")");
    if (hp_.n_embd != t.n_embd || hp_.hc_count != t.hc_count || hp_.n_head != t.n_head ||
        hp_.head_dim != t.head_dim || hp_.n_expert != t.n_expert || hp_.n_layer != t.n_layer)
        fail(path, ": MTP head does not fit the model (hidden ", hp_.n_embd, " vs ", t.n_embd, ", layers ",
             hp_.n_layer, " vs ", t.n_layer, ")");
    hp_.n_vocab = t.n_vocab;
    const int il = hp_.n_layer;
    if (hp_.is_recurrent[il]) fail(path, ": the MTP block ", il, " must be an attention block");
    block_ = bind_layer(*file_, hp_, il);
    nextn_ = bind_nextn(*file_, hp_, il);
    trunk.backend().prepare_weights_extra(block_, nextn_);
    kv_ = std::make_unique<Session>(trunk.backend(), kv_hparams(hp_), n_ctx);
}

MtpHead::~MtpHead() = default;

void MtpHead::forward(const float* wide_in, const int32_t* next_ids, int T, int P0, float* logits, float* wide_out,
                      const std::array<int32_t, 3>* pos3) {
    Backend& be = trunk_.backend();
    const Hparams& hp = hp_;
    const int n = hp.hc_count, H = hp.n_embd, nH = n * H, V = hp.n_vocab;
    STRATA_CHECK(P0 >= 0 && P0 + T <= n_ctx_, "MTP positions ", P0, "..", P0 + T, " exceed the context ", n_ctx_);
    std::vector<int32_t> pos(T);
    for (int t = 0; t < T; ++t) {
        STRATA_CHECK(next_ids[t] >= 0 && next_ids[t] < V, "MTP: token id ", next_ids[t], " is outside the vocabulary of ", V);
        pos[t] = P0 + t;
    }
    GraphScope graph(be, T <= kGraphMaxTokens);     // scratch taken inside it: see Qwen4Exp::forward
    Scratch e(be, (size_t)T * H), e4(be, (size_t)T * nH), X(be, (size_t)T * nH), hn(be, (size_t)T * nH),
        cat(be, (size_t)T * n * 2 * H), u(be, (size_t)T * H), y(be, (size_t)T * H), inj(be, (size_t)T * n),
        lg(be, logits ? (size_t)T * V : 1), d_ids(be, T), d_pos(be, T), d_pos3(be, pos3 ? (size_t)3 * T : 1);
    const int32_t* pos_dev = upload_ints(be, d_pos, pos);
    QsaRope mrope;     // dense attention: no block keys, so no earlier positions
    std::vector<int32_t> rows3;
    if (pos3) {
        rows3.resize((size_t)3 * T);
        for (int t = 0; t < T; ++t)
            for (int a = 0; a < 3; ++a) rows3[(size_t)a * T + t] = pos3[t][a];
        mrope.pos3 = upload_ints(be, d_pos3, rows3);
        mrope.host3 = rows3.data();
        mrope.sec_h = hp.rope_sections[1];
        mrope.sec_w = hp.rope_sections[2];
    }
    be.embed(trunk_.weights().token_embd, upload_ints(be, d_ids, std::vector<int32_t>(next_ids, next_ids + T)), T, e);
    be.rms_norm(e, &nextn_.enorm, T, H, H, hp.rms_eps, e);
    be.repeat_streams(e, T, n, H, e4);
    be.to_device(X, wide_in, (size_t)T * nH);
    be.rms_norm(X, &nextn_.hnorm, T, nH, H, hp.rms_eps, hn);
    // Per stream: h0_s = eh_proj · [enorm(e) ; hnorm(X)_s]  (embedding half first)
    be.concat_cols(e4, hn, T * n, H, H, cat);
    be.matmul(nextn_.eh_proj, cat, T * n, X);

    hyper_read(be, hp, block_.hc_attn, X, T, u, inj);
    qsa_block(be, hp, block_.qsa, kv_->layers[0], 0, u, T, P0, pos_dev, y, pos3 ? &mrope : nullptr);   // dense
    be.hyper_inject(X, inj, y, T, n, H);
    hyper_read(be, hp, block_.hc_ffn, X, T, u, inj);
    moe_block(be, hp, block_.moe, u, T, y);
    be.hyper_inject(X, inj, y, T, n, H);

    if (logits) {
        hyper_read(be, hp, nextn_.head, X, T, u, nullptr);
        be.matmul(trunk_.weights().output, u, T, lg);
    }
    graph.end();
    if (wide_out) be.to_host(wide_out, X, (size_t)T * nH);
    if (logits) be.to_host(logits, lg, (size_t)T * V);
}

}  // namespace strata
