// Hyper-connection read (MODEL.md §5): grouped RMSNorm of the n streams, low-rank mix weights, mean over streams.
// Backend::hyper_read's default body lives here: the composition of primitive ops (the CPU reference).
#include "common/error.h"
#include "model/blocks.h"

namespace strata {

void Backend::hyper_read(const HyperWeights& w, const float* X, int T, int n, int H, float eps, float* u, float* inj) {
    Backend& be = *this;
    const int nH = n * H, r = (int)w.down.n_rows();
    Scratch xn(be, (size_t)T * nH), a(be, (size_t)T * r), m(be, (size_t)T * nH);
    be.rms_norm(X, &w.norm, T, nH, H, eps, xn);
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

void Backend::hyper_inject_read(float* X, const float* inj_prev, const float* y, const HyperWeights& w, int T, int n,
                                int H, float eps, float* u, float* inj) {
    hyper_inject(X, inj_prev, y, T, n, H);
    hyper_read(w, X, T, n, H, eps, u, inj);
}

void hyper_read(Backend& be, const Hparams& hp, const HyperWeights& w, const float* X, int T, float* u, float* inj) {
    STRATA_CHECK(w.down.n_rows() == hp.hc_low_rank, "hyper_read: down weight has ", w.down.n_rows(),
                 " rows for hc_low_rank ", hp.hc_low_rank);
    be.hyper_read(w, X, T, hp.hc_count, hp.n_embd, hp.rms_eps, u, inj);
}

void hyper_inject_read(Backend& be, const Hparams& hp, const HyperWeights& w, float* X, const float* inj_prev,
                       const float* y, int T, float* u, float* inj) {
    STRATA_CHECK(w.down.n_rows() == hp.hc_low_rank, "hyper_read: down weight has ", w.down.n_rows(),
                 " rows for hc_low_rank ", hp.hc_low_rank);
    be.hyper_inject_read(X, inj_prev, y, w, T, hp.hc_count, hp.n_embd, hp.rms_eps, u, inj);
}

}  // namespace strata
