// QSA indexed attention (MODEL.md §8) as transformers computes it: the indexer scores complete blocks of cr keys
// by pooled block keys (cached once per completed block), keeps the top budget/cr blocks plus the unfinished tail,
// and gated GQA softmax attention runs over those cells only. Not llama.cpp's token-level variant (GGUF.md §5.8).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/blocks.h"
#include "model/topk.h"

namespace strata {

namespace {

// The key positions query position p may attend to, ascending.
std::vector<int32_t> select_cells(Backend& be, const Hparams& hp, const LayerState& st, int cr, const float* qi, int p,
                                  std::vector<float>& scores_host, float* scores_dev) {
    const int M = p + 1;                 // visible keys
    const int nb = M / cr;               // complete blocks
    const int budget_blocks = hp.indexer_top_k / cr;
    std::vector<int32_t> cells;
    if (nb <= budget_blocks) {
        cells.resize(M);
        std::iota(cells.begin(), cells.end(), 0);
        return cells;
    }
    const int di = hp.indexer_head_dim;
    be.indexer_scores(qi, st.idx_kblock, nb, hp.indexer_n_head, di, 1.0f / std::sqrt((float)di), scores_dev);
    scores_host.resize(nb);
    be.to_host(scores_host.data(), scores_dev, nb);
    std::vector<int32_t> chosen = torch_topk_indices(scores_host.data(), nb, budget_blocks);
    std::sort(chosen.begin(), chosen.end());
    for (int32_t b : chosen)
        for (int j = 0; j < cr; ++j) cells.push_back(b * cr + j);
    for (int c = nb * cr; c < M; ++c) cells.push_back(c);   // the incomplete tail block
    return cells;
}

}  // namespace

void qsa_block(Backend& be, const Hparams& hp, const QsaWeights& w, LayerState& st, int cr, const float* u, int T,
               int P, float* y) {
    const int nh = hp.n_head, nkv = hp.n_head_kv, hd = hp.head_dim, kvw = nkv * hd;
    std::vector<int32_t> pos(T);
    for (int t = 0; t < T; ++t) pos[t] = P + t;

    const int ni = hp.indexer_n_head, di = hp.indexer_head_dim;
    Scratch qg(be, (size_t)T * nh * 2 * hd), q(be, (size_t)T * nh * hd), gate(be, (size_t)T * nh * hd),
        qi(be, cr > 0 ? (size_t)T * ni * di : 1);
    float* k_new = st.k_cache + (size_t)P * kvw;
    float* v_new = st.v_cache + (size_t)P * kvw;
    // The products of u first, one after the other (a GPU backend quantizes u once for them).
    be.matmul(w.q, u, T, qg);
    be.matmul(w.k, u, T, k_new);
    be.matmul(w.v, u, T, v_new);
    if (cr > 0) {
        be.matmul(w.idx_q, u, T, qi);
        be.matmul(w.idx_k, u, T, st.idx_kraw + (size_t)P * di);
    }

    be.deinterleave(qg, T, nh, hd, hd, q, gate);              // per head: [hd query | hd gate]
    be.rms_norm(q, &w.q_norm, T, nh * hd, hd, hp.rms_eps, q);
    be.rope(q, T, nh, hd, hp.n_rot, hp.rope_theta, pos.data());
    be.rms_norm(k_new, &w.k_norm, T, kvw, hd, hp.rms_eps, k_new);
    be.rope(k_new, T, nkv, hd, hp.n_rot, hp.rope_theta, pos.data());

    std::vector<std::vector<int32_t>> keep(T);
    if (cr > 0) {
        be.rms_norm(qi, &w.idx_q_norm, T, ni * di, di, hp.rms_eps, qi);
        be.rope(qi, T, ni, di, hp.n_rot, hp.rope_theta, pos.data());
        // Pool every block completed by these tokens: mean of raw keys, norm, RoPE at the block's first position.
        for (int p = P; p < P + T; ++p) {
            if ((p + 1) % cr != 0) continue;
            const int b = (p + 1) / cr - 1;
            float* kb = st.idx_kblock + (size_t)b * di;
            be.mean_rows(st.idx_kraw + (size_t)b * cr * di, cr, di, kb);
            be.rms_norm(kb, &w.idx_k_norm, 1, di, di, hp.rms_eps, kb);
            const int32_t first = b * cr;
            be.rope(kb, 1, 1, di, hp.n_rot, hp.rope_theta, &first);
        }
        Scratch scores(be, (size_t)(P + T) / cr + 1);
        std::vector<float> scores_host;
        for (int t = 0; t < T; ++t)
            keep[t] = select_cells(be, hp, st, cr, qi + (size_t)t * ni * di, P + t, scores_host, scores);
    } else {
        for (int t = 0; t < T; ++t) {
            keep[t].resize(P + t + 1);
            std::iota(keep[t].begin(), keep[t].end(), 0);
        }
    }

    Scratch o(be, (size_t)T * nh * hd);
    be.attention(q, st.k_cache, st.v_cache, T, nh, nkv, hd, keep, o);
    be.unary(Unary::sigmoid, gate, (size_t)T * nh * hd, 1.0f, gate);
    be.mul(o, gate, (size_t)T * nh * hd, o);
    be.matmul(w.out, o, T, y);
}

}  // namespace strata
