// PLE, hashed n-gram per-layer embeddings (MODEL.md §6, GGUF.md §2.5): n-gram ids of the token history with
// EOS segments, table rows read from the file by a PleReader (positioned reads without the page cache, begun at the
// start of the pass), key/value gate and the dilated causal conv with its carried history.
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "common/error.h"
#include "model/blocks.h"
#include "quant/quant.h"

namespace strata {

void ple_rows(const Hparams& hp, const std::vector<int32_t>& tokens, size_t t, uint64_t* rows) {
    const int N = hp.ple_ngram, hpn = hp.ple_heads_per_ngram;
    // ctx[s] = the token s positions back, or EOS once the window reaches the sequence start or crosses an EOS
    // (the token's own EOS does not cut its own window).
    uint64_t ctx[8];
    ctx[0] = (uint64_t)tokens[t];
    bool cut = false;
    for (int s = 1; s < N; ++s) {
        if (cut || t < (size_t)s) {
            ctx[s] = hp.ple_eos_id;
            cut = true;
            continue;
        }
        ctx[s] = (uint64_t)tokens[t - s];
        if (ctx[s] == hp.ple_eos_id) cut = true;
    }
    for (int o = 2; o <= N; ++o) {
        uint64_t mix = 0;
        for (int j = 0; j < o; ++j) mix ^= ctx[j] * hp.ple_multipliers[j];   // wrapping uint64 arithmetic
        for (int j = 0; j < hpn; ++j) {
            const int h = (o - 2) * hpn + j;
            rows[h] = mix % hp.ple_head_sizes[h] + hp.ple_head_offsets[h];
        }
    }
}

std::vector<int32_t> ple_context(const Hparams& hp, const std::vector<int32_t>& history, const int32_t* pre,
                                 int n_pre) {
    // The n-grams reach back ple_ngram − 1 tokens: only that tail of history + pre is needed. A tail shorter than the
    // reach is the whole sequence (its start is the sequence start); a full one never reaches its own start.
    const size_t back = (size_t)std::max(0, hp.ple_ngram - 1), total = history.size() + (size_t)n_pre;
    std::vector<int32_t> tail;
    for (size_t i = total > back ? total - back : 0; i < total; ++i)
        tail.push_back(i < history.size() ? history[i] : pre[i - history.size()]);
    return tail;
}

void ple_begin_reads(const Hparams& hp, PleReader& reader, const std::vector<int32_t>& context, const int32_t* ids,
                     int T) {
    std::vector<int32_t> tokens(context);
    tokens.insert(tokens.end(), ids, ids + T);
    const int G = hp.ple_n_heads();
    std::vector<uint64_t> rows((size_t)T * G);
    for (int t = 0; t < T; ++t) ple_rows(hp, tokens, context.size() + t, rows.data() + (size_t)t * G);
    reader.begin(rows.data(), rows.size());
}

void ple_block(Backend& be, const Hparams& hp, const PleWeights& w, PleReader& reader, LayerState& st, int T,
               float* X, float* conv_in) {
    const int n = hp.hc_count, H = hp.n_embd, nH = n * H, G = hp.ple_n_heads(), dh = hp.ple_row_width, Dp = G * dh;
    // The G rows of every token (begun by ple_begin_reads), dequantized on the host.
    const GgufTensor& table = *w.table;
    const size_t row_bytes = ggml_row_bytes(table.type, dh);
    STRATA_CHECK(reader.row_bytes() == row_bytes, "PLE reader rows of ", reader.row_bytes(), " bytes for ", row_bytes);
    const uint8_t* raw = reader.wait();
    std::vector<float> e_host((size_t)T * Dp);
    for (size_t i = 0; i < (size_t)T * G; ++i) dequantize_row(table.type, raw + i * row_bytes, e_host.data() + i * dh, dh);
    Scratch e(be, (size_t)T * Dp);
    be.to_device(e, e_host.data(), e_host.size());

    // Two [T, n·H] buffers besides X (a prompt chunk's largest activations: 40 KB a token each for the published
    // shape): gv overwrites Q (ple_gate allows it), gvn takes K's memory, and c takes gv's once X holds gv.
    Scratch K(be, (size_t)T * nH), v(be, (size_t)T * H), Q(be, (size_t)T * nH);
    be.matmul(w.key, e, T, K);
    be.rms_norm(K, &w.norm_key, T, nH, H, hp.rms_eps, K);
    be.matmul(w.value, e, T, v);
    be.rms_norm(X, &w.norm_query, T, nH, H, hp.rms_eps, Q);
    float* gv = Q;
    be.ple_gate(K, Q, v, T, n, H, gv);
    float* gvn = K;
    be.rms_norm(gv, &w.norm_conv, T, nH, H, hp.rms_eps, gvn);
    be.add(X, gv, (size_t)T * nH);
    float* c = gv;
    if (conv_in) be.copy(conv_in, gvn, (size_t)T * nH);
    be.causal_conv(gvn, T, nH, w.conv1d, hp.ple_conv_kernel, hp.ple_ngram, st.ple_hist, c);
    be.unary(Unary::silu, c, (size_t)T * nH, 1.0f, c);
    be.add(X, c, (size_t)T * nH);
}

void ple_advance_history(Backend& be, const Hparams& hp, const PleWeights& w, LayerState& st, int T,
                         const float* conv_in) {
    const size_t nH = (size_t)hp.hc_dim();
    Scratch c(be, (size_t)T * nH);   // the conv's output, not needed
    be.causal_conv(conv_in, T, (int)nH, w.conv1d, hp.ple_conv_kernel, hp.ple_ngram, st.ple_hist, c);
}

}  // namespace strata
