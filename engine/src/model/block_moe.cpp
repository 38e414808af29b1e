// MoE (MODEL.md §10): softmax router over all experts, top-k, renormalised; SwiGLU experts; shared expert with a
// sigmoid gate. Routing runs on the backend's device (route_topk), so the pass needs no host round trip.
// Backend::shared_expert's and moe_experts_with_shared's default bodies live here: the compositions of primitive ops
// (the CPU reference).
#include "model/blocks.h"

namespace strata {

void Backend::shared_expert(const MoeWeights& w, const float* u, int T, float* y) {
    Backend& be = *this;
    const int H = (int)w.down_shexp.n_rows(), Is = (int)w.gate_shexp.n_rows();
    Scratch g(be, (size_t)T * Is), up(be, (size_t)T * Is), sh(be, (size_t)T * H), sg(be, (size_t)T);
    be.matmul(w.gate_shexp, u, T, g);
    be.matmul(w.up_shexp, u, T, up);
    be.matmul(w.shexp_gate_inp, u, T, sg);
    be.unary(Unary::silu, g, (size_t)T * Is, 1.0f, g);
    be.mul(g, up, (size_t)T * Is, g);
    be.matmul(w.down_shexp, g, T, sh);
    be.unary(Unary::sigmoid, sg, (size_t)T, 1.0f, sg);
    be.hyper_inject(y, sg, sh, T, 1, H);   // y += σ(gate)·shared, one "stream"
}

void Backend::moe_experts_with_shared(const MoeWeights& w, const float* x, int T, int k, const int32_t* ids,
                                      const float* weights, float* y) {
    moe_experts(w, x, T, k, ids, weights, y);
    shared_expert(w, x, T, y);
}

void moe_block(Backend& be, const Hparams& hp, const MoeWeights& w, const float* u, int T, float* y) {
    const int E = hp.n_expert, k = hp.n_expert_used;
    Scratch logits(be, (size_t)T * E), ids(be, (size_t)T * k), weights(be, (size_t)T * k);
    int32_t* ids_dev = reinterpret_cast<int32_t*>(ids.get());     // int32 values in float-sized slots
    be.matmul(w.router, u, T, logits);
    be.route_topk(logits, T, E, k, ids_dev, weights);
    be.moe_experts_with_shared(w, u, T, k, ids_dev, weights, y);
}

}  // namespace strata
