// MoE (MODEL.md §10): softmax router over all experts, top-k, renormalised; SwiGLU experts; shared expert with a
// sigmoid gate. Routing is decided on the host.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/blocks.h"
#include "model/topk.h"

namespace strata {

void moe_block(Backend& be, const Hparams& hp, const MoeWeights& w, const float* u, int T, float* y) {
    const int H = hp.n_embd, E = hp.n_expert, k = hp.n_expert_used, Is = hp.n_ff_shexp;
    Scratch logits(be, (size_t)T * E);
    be.matmul(w.router, u, T, logits);
    std::vector<float> p((size_t)T * E);
    be.to_host(p.data(), logits, p.size());
    std::vector<int32_t> ids((size_t)T * k);
    std::vector<float> weights((size_t)T * k);
    for (int t = 0; t < T; ++t) {
        float* pt = p.data() + (size_t)t * E;
        const float mx = *std::max_element(pt, pt + E);
        float sum = 0;
        for (int e = 0; e < E; ++e) { pt[e] = std::exp(pt[e] - mx); sum += pt[e]; }
        for (int e = 0; e < E; ++e) pt[e] /= sum;
        const std::vector<int32_t> top_ids = torch_topk_indices(pt, E, k);
        float top = 0;
        for (int j = 0; j < k; ++j) top += pt[top_ids[j]];
        for (int j = 0; j < k; ++j) {
            ids[(size_t)t * k + j] = top_ids[j];
            weights[(size_t)t * k + j] = pt[top_ids[j]] / top;
        }
    }
    be.moe_experts(w, u, T, k, ids.data(), weights.data(), y);

    Scratch g(be, (size_t)T * Is), up(be, (size_t)T * Is), sh(be, (size_t)T * H), sg(be, (size_t)T);
    be.matmul(w.gate_shexp, u, T, g);
    be.matmul(w.up_shexp, u, T, up);
    be.unary(Unary::silu, g, (size_t)T * Is, 1.0f, g);
    be.mul(g, up, (size_t)T * Is, g);
    be.matmul(w.down_shexp, g, T, sh);
    be.matmul(w.shexp_gate_inp, u, T, sg);
    be.unary(Unary::sigmoid, sg, (size_t)T, 1.0f, sg);
    be.hyper_inject(y, sg, sh, T, 1, H);   // y += σ(gate)·shared, one "stream"
}

}  // namespace strata
