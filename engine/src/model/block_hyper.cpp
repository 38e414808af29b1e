// Hyper-connection read (MODEL.md §5): grouped RMSNorm of the n streams, low-rank mix weights, mean over streams.
#include "model/blocks.h"

namespace strata {

void hyper_read(Backend& be, const Hparams& hp, const HyperWeights& w, const float* X, int T, float* u, float* inj) {
    const int n = hp.hc_count, H = hp.n_embd, nH = n * H, r = hp.hc_low_rank;
    Scratch xn(be, (size_t)T * nH), a(be, (size_t)T * r), m(be, (size_t)T * nH);
    be.rms_norm(X, &w.norm, T, nH, H, hp.rms_eps, xn);
    be.matmul(w.down, xn, T, a);
    if (inj) be.matmul(w.inject, xn, T, inj);                  // next to the other product of xn (one quantization)
    be.unary(Unary::silu, a, (size_t)T * r, 1.0f / n, a);      // divide by n before the silu
    be.matmul(w.up, a, T, m);
    be.unary(Unary::sigmoid, m, (size_t)T * nH, 1.0f, m);
    be.hyper_mix(xn, m, T, n, H, u);
    if (inj) {
        be.unary(Unary::sigmoid, inj, (size_t)T * n, 1.0f / n, inj);
        be.scale(inj, (size_t)T * n, 2.0f);                      // inj in (0, 2)
    }
}

}  // namespace strata
