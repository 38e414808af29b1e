// QSA indexed attention (MODEL.md §8) as transformers computes it: the indexer scores complete blocks of cr keys
// by pooled block keys (cached once per completed block), keeps the top budget/cr blocks plus the unfinished tail
// (chosen on the backend's device), and gated GQA softmax attention runs over those cells only. Not llama.cpp's
// token-level variant (GGUF.md §5.8).
#include <algorithm>
#include <cmath>

#include "model/blocks.h"

namespace strata {

std::vector<int32_t> qsa_query_offsets(const Hparams& hp, int cr, int P, int T) {
    const int kb = cr > 0 ? hp.indexer_top_k / cr : 0;
    const bool select = cr > 0 && (P + T) / cr > kb;
    std::vector<int32_t> off(T + 1, 0);
    for (int t = 0; t < T; ++t) {
        const int M = P + t + 1, nb = select ? M / cr : 0;
        off[t + 1] = off[t] + (nb > kb ? kb * cr + (M - nb * cr) : M);
    }
    return off;
}

void qsa_block(Backend& be, const Hparams& hp, const QsaWeights& w, LayerState& st, int cr, const float* u, int T,
               int P, const int32_t* pos, float* y, const QsaRope* mrope, const int32_t* offsets) {
    const int nh = hp.n_head, nkv = hp.n_head_kv, hd = hp.head_dim, kvw = nkv * hd;
    const int ni = hp.indexer_n_head, di = hp.indexer_head_dim;
    Scratch qg(be, (size_t)T * nh * 2 * hd), q(be, (size_t)T * nh * hd), gate(be, (size_t)T * nh * hd),
        k_new(be, (size_t)T * kvw), v_new(be, (size_t)T * kvw), qi(be, cr > 0 ? (size_t)T * ni * di : 1),
        ki(be, cr > 0 ? (size_t)T * di : 1);
    // The products of u first, one after the other (a GPU backend quantizes u once for them). New keys and values
    // are finished in scratch, then written at their positions (scatter_rows reads them from `pos`, so a pass's
    // ops do not depend on P and a GPU backend can replay one graph for every decode step).
    be.matmul(w.q, u, T, qg);
    be.matmul(w.k, u, T, k_new);
    be.matmul(w.v, u, T, v_new);
    if (cr > 0) {
        be.matmul(w.idx_q, u, T, qi);
        be.matmul(w.idx_k, u, T, ki);
    }

    // Text passes rotate at the cache row; multimodal ones at their M-RoPE positions (transformers uses the same
    // cos/sin for q, k, the indexer's q and the block keys).
    auto rope = [&](float* x, int heads, int dim) {
        if (mrope) be.rope_multi(x, T, heads, dim, hp.n_rot, hp.rope_theta, mrope->pos3, mrope->sec_h, mrope->sec_w);
        else be.rope(x, T, heads, dim, hp.n_rot, hp.rope_theta, pos);
    };
    if (mrope) {   // Backend::qsa_heads' ops, with the multimodal rotation
        auto norm_rope = [&](float* x, const Weight& norm, int heads, int dim) {
            be.rms_norm(x, &norm, T, heads * dim, dim, hp.rms_eps, x);
            rope(x, heads, dim);
        };
        be.deinterleave(qg, T, nh, hd, hd, q, gate);   // per head: [hd query | hd gate]
        norm_rope(q, w.q_norm, nh, hd);
        norm_rope(k_new, w.k_norm, nkv, hd);
        if (cr > 0) norm_rope(qi, w.idx_q_norm, ni, di);
    } else {
        be.qsa_heads(qg, q, gate, k_new, qi, w.q_norm, w.k_norm, cr > 0 ? &w.idx_q_norm : nullptr, T, nh, nkv, hd, ni,
                     di, hp.rms_eps, hp.n_rot, hp.rope_theta, pos);
    }
    be.write_kv(st.k_cache, k_new, T, kvw, pos);
    be.write_kv(st.v_cache, v_new, T, kvw, pos);

    // Cells beyond the budget are chosen on the device (select_cells); otherwise every query sees all earlier keys.
    const int kb = cr > 0 ? hp.indexer_top_k / cr : 0;
    const bool select = cr > 0 && (P + T) / cr > kb;
    if (cr > 0) {
        // Raw indexer keys, then the pooled key of every block these tokens complete (mean, norm, RoPE at the
        // block's first position).
        be.scatter_rows(st.idx_kraw, ki, T, di, pos);
        be.pool_key_blocks(st.idx_kraw, st.idx_kblock, pos, T, cr, di, w.idx_k_norm, hp.rms_eps,
                           mrope ? 0 : hp.n_rot, hp.rope_theta);
        // M-RoPE: the blocks b0 … b1 − 1 this pass completes rotate by the positions of their first tokens (held on
        // the host), after the pooling left them unrotated.
        const int b0 = P / cr, b1 = (P + T) / cr;
        if (mrope && b1 > b0) {
            const int nb = b1 - b0;
            std::vector<int32_t> bp((size_t)3 * nb);
            for (int b = b0; b < b1; ++b) {
                const int first = b * cr;
                for (int a = 0; a < 3; ++a)
                    bp[(size_t)a * nb + (b - b0)] =
                        first < P ? (*mrope->earlier)[first][a] : mrope->host3[(size_t)a * T + (first - P)];
            }
            Scratch d_bp(be, bp.size());
            be.rope_multi(st.idx_kblock + (size_t)b0 * di, nb, 1, di, hp.n_rot, hp.rope_theta, upload_ints(be, d_bp, bp),
                          mrope->sec_h, mrope->sec_w);
        }
    }

    float* o = qg;   // [T, nh·hd] in qg's memory ([T, nh·2·hd]), dead since the deinterleave: a prompt chunk's
                     // activations bound its size on a small card (bench/results/2026-12-05-vm-prompt-memory)
    Scratch d_off(be, offsets ? 1 : T + 1);
    const int32_t* off_dev = offsets ? offsets : upload_ints(be, d_off, qsa_query_offsets(hp, cr, P, T));
    if (select) {
        // Sizes rounded up so that the scratch taken after these stays at the same addresses from pass to pass
        // (a GPU backend's graphs of the rest of the pass then repeat; see GraphBackend).
        const int stride = (P + T) / cr, stride_cap = (stride + 255) / 256 * 256;
        Scratch scores(be, (size_t)T * stride_cap), cells(be, (size_t)T * (kb * cr + cr));
        // Every query's block scores in one op (those of a query within the budget are not read); positions from
        // memory, the row stride rounded up: a decode pass's op repeats for 256 blocks.
        be.indexer_scores(qi, st.idx_kblock, T, pos, cr, ni, di, 1.0f / std::sqrt((float)di), scores, stride_cap);
        int32_t* cells_dev = reinterpret_cast<int32_t*>(cells.get());
        be.select_cells(scores, stride_cap, T, pos, cr, kb, off_dev, cells_dev);
        be.attention_cells(q, st.k_cache, st.v_cache, T, nh, nkv, hd, off_dev, cells_dev, kb * cr + cr - 1, o);
    } else {
        // Query t sees keys 0 … P + t: counts on the device, the bound rounded up so that it changes every
        // kCellBoundStep tokens rather than every pass.
        const int bound = (P + T + kCellBoundStep - 1) / kCellBoundStep * kCellBoundStep;
        be.attention_cells(q, st.k_cache, st.v_cache, T, nh, nkv, hd, off_dev, nullptr, bound, o);
    }
    be.sigmoid_gate(o, gate, (size_t)T * nh * hd);
    be.matmul(w.out, o, T, y);
}

void Backend::qsa_heads(const float* qg, float* q, float* gate, float* k, float* qi, const Weight& q_norm,
                        const Weight& k_norm, const Weight* qi_norm, int T, int nh, int nkv, int hd, int ni, int di,
                        float eps, int n_rot, float theta, const int32_t* pos) {
    deinterleave(qg, T, nh, hd, hd, q, gate);
    rms_norm(q, &q_norm, T, nh * hd, hd, eps, q);
    rope(q, T, nh, hd, n_rot, theta, pos);
    rms_norm(k, &k_norm, T, nkv * hd, hd, eps, k);
    rope(k, T, nkv, hd, n_rot, theta, pos);
    if (qi_norm) {
        rms_norm(qi, qi_norm, T, ni * di, di, eps, qi);
        rope(qi, T, ni, di, n_rot, theta, pos);
    }
}

void Backend::sigmoid_gate(float* o, float* gate, size_t n) {
    unary(Unary::sigmoid, gate, n, 1.0f, gate);
    mul(o, gate, n, o);
}

}  // namespace strata
