// Gated DeltaNet layer (MODEL.md §7) on GGUF weights: value heads in tiled order (head p uses key head p mod nk),
// ssm_a already −exp(A_log), ssm_norm not folded, sigmoid output gate. Backend::gdn_block's default body lives here:
// the composition of primitive ops (the CPU reference).
#include <cmath>

#include "common/error.h"
#include "model/blocks.h"

namespace strata {

void Backend::gdn_block(const GdnWeights& w, const GdnShape& s, const float* u, int T, float* conv_hist, float* S,
                        float* y, GdnProjections keep) {
    Backend& be = *this;
    const int nk = s.nk, nv = s.nv, d = s.d;
    const int kd = nk * d, vd = nv * d, cd = 2 * kd + vd;
    Scratch qkv(be, (size_t)T * cd), conv(be, (size_t)T * cd);
    Scratch beta(be, (size_t)T * nv), g(be, (size_t)T * nv);
    // Kept projections: qkv [tokens, cd], then β and α [tokens, nv] (the ops below overwrite their own copies).
    STRATA_CHECK(!keep.proj || T <= keep.tokens, "gdn_block: ", T, " tokens of projections kept for ", keep.tokens);
    STRATA_CHECK(!keep.proj || keep.record || !y, "gdn_block: a replay of kept projections advances the state only");
    float* kept_qkv = keep.proj;
    float* kept_beta = keep.proj ? kept_qkv + (size_t)keep.tokens * cd : nullptr;
    float* kept_alpha = keep.proj ? kept_beta + (size_t)keep.tokens * nv : nullptr;
    if (keep.proj && !keep.record) {
        be.copy(qkv, kept_qkv, (size_t)T * cd);
        be.copy(beta, kept_beta, (size_t)T * nv);
        be.copy(g, kept_alpha, (size_t)T * nv);
    } else {
        be.matmul(w.qkv, u, T, qkv);
        be.matmul(w.beta, u, T, beta);
        be.matmul(w.alpha, u, T, g);
        if (keep.proj) {
            be.copy(kept_qkv, qkv, (size_t)T * cd);
            be.copy(kept_beta, beta, (size_t)T * nv);
            be.copy(kept_alpha, g, (size_t)T * nv);
        }
    }

    be.causal_conv(qkv, T, cd, w.conv1d, s.conv_kernel, 1, conv_hist, conv);
    be.unary(Unary::silu, conv, (size_t)T * cd, 1.0f, conv);
    // q, k, v (T·kd + T·kd + T·vd = T·cd) take qkv's memory, which the conv has consumed; o then takes conv's, and
    // the output gate z takes qkv's after the recurrence. A prompt chunk's activations are what bounds its size on
    // a small card (bench/results/2026-12-05-vm-prompt-memory).
    float* q = qkv;
    float* k = q + (size_t)T * kd;
    float* v = k + (size_t)T * kd;
    be.slice_cols(conv, T, cd, 0, kd, q);
    be.slice_cols(conv, T, cd, kd, kd, k);
    be.slice_cols(conv, T, cd, 2 * kd, vd, v);
    be.l2_norm(q, T, kd, d, 1e-6f, 1.0f / std::sqrt((float)d), q);   // transformers' l2norm eps is fixed at 1e-6
    be.l2_norm(k, T, kd, d, 1e-6f, 1.0f, k);

    be.unary(Unary::sigmoid, beta, (size_t)T * nv, 1.0f, beta);
    be.add_row(g, T, nv, w.dt_bias);
    be.unary(Unary::softplus, g, (size_t)T * nv, 1.0f, g);
    be.mul_row(g, T, nv, w.a);                                       // g = −exp(A_log)·softplus(a + dt_bias) ≤ 0

    float* o = conv;
    be.gdn_recurrent(q, k, v, g, beta, T, nk, nv, d, d, S, o);
    if (!y) return;   // the carried state only (Qwen4Exp::replay)

    // Gated RMSNorm per value head: norm(o)·w·σ(z)
    float* z = qkv;
    be.matmul(w.gate, u, T, z);
    be.rms_norm(o, &w.norm, T, vd, d, s.rms_eps, o);
    be.unary(Unary::sigmoid, z, (size_t)T * vd, 1.0f, z);
    be.mul(o, z, (size_t)T * vd, o);
    be.matmul(w.out, o, T, y);
}

Backend::GdnShape gdn_shape(const Hparams& hp) {
    Backend::GdnShape s;
    s.nk = hp.ssm_n_key_head;
    s.nv = hp.ssm_n_value_head;
    s.d = hp.ssm_head_dim;
    s.conv_kernel = hp.ssm_conv_kernel;
    s.rms_eps = hp.rms_eps;
    return s;
}

void gdn_block(Backend& be, const Hparams& hp, const GdnWeights& w, LayerState& st, const float* u, int T, float* y,
               Backend::GdnProjections keep) {
    be.gdn_block(w, gdn_shape(hp), u, T, st.conv_hist, st.ssm, y, keep);
}

}  // namespace strata
