// CudaBackend's gated delta-net ops: causal_conv, gdn_recurrent and the fused gdn_block (kernels/gdn_fused.cu), with
// their counters.
#include "backend/cuda/cuda_backend_impl.h"

namespace strata {

namespace {
std::atomic<int64_t> fused_gdn_count{0};       // gdn_block calls on the fused path, all backends
std::atomic<int64_t> gdn_quant_count{0};       // of those, calls whose recurrence kernel quantized o
std::atomic<int64_t> gdn_fold_count{0};        // of those, calls whose recurrence kernel did the conv
}

void CudaBackend::causal_conv(const float* x, int T, int C, const Weight& w, int K, int dil, float* hist, float* y) {
    Impl::OpScope prof_op(*impl_, "causal_conv");
    STRATA_CHECK(w.ne[0] * w.n_rows() == (int64_t)K * C, "cuda causal_conv: weight ", w.tensor ? w.tensor->name : "",
                 " has ", w.ne[0] * w.n_rows(), " taps for ", C, " channels of ", K);
    Impl::Buf tmp(*impl_, std::max<size_t>(1, (size_t)(K - 1) * dil * C) * sizeof(float));
    cuda::causal_conv(impl_->stream, x, T, C, impl_->dev_f32(w), K, dil, hist, tmp.as<float>(), y);
    impl_->done("causal_conv");
}

void CudaBackend::gdn_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta,
                                int T, int nk, int nv, int dk, int dv, float* S, float* o) {
    Impl::OpScope prof_op(*impl_, "gdn_recurrent");
    cuda::gdn_recurrent(impl_->stream, q, k, v, g, beta, T, nk, nv, dk, dv, S, o);
    impl_->done("gdn_recurrent");
}

void CudaBackend::gdn_block(const GdnWeights& w, const GdnShape& s, const float* u, int T, float* conv_hist, float* S,
                            float* y, GdnProjections keep) {
    const int nk = s.nk, nv = s.nv, d = s.d, K = s.conv_kernel;
    const int kd = nk * d, vd = nv * d, cd = 2 * kd + vd;
    auto values = [](const Weight& v) { return v.present() ? v.ne[0] * v.n_rows() : 0; };
    const bool fused = impl_->fused_gdn && T > 0 && cuda::gdn_fused_supported(d, K) && values(w.conv1d) == (int64_t)cd * K &&
                       values(w.dt_bias) == nv && values(w.a) == nv && values(w.norm) > 0 && w.qkv.n_rows() == cd &&
                       w.gate.n_rows() == vd && w.beta.n_rows() == nv && w.alpha.n_rows() == nv;
    if (!fused) {
        Backend::gdn_block(w, s, u, T, conv_hist, S, y, keep);
        return;
    }
    STRATA_CHECK(!keep.proj || T <= keep.tokens, "cuda gdn_block: ", T, " tokens of projections kept for ", keep.tokens);
    STRATA_CHECK(!keep.proj || keep.record || !y, "cuda gdn_block: a replay of kept projections advances the state only");
    const bool replay = keep.proj && !keep.record;
    Impl::OpScope prof_op(*impl_, "gdn_block");
    ++fused_gdn_count;
    auto args = [&](const Weight& m) { return impl_->dense_args(m); };
    // The projections qkv [T, cd], z [T, vd], beta and alpha [T, nv]: consecutive ones whose device data follow each
    // other in one format (upload_together) run as one matmul, whose output rows hold them side by side (row stride
    // ld). All matmuls of u share its quantization (act_cache). Kept projections (keep.proj) are that buffer for
    // keep.tokens tokens: a recording call writes its rows there, a replay takes its first T rows of each group.
    struct Proj {
        const Weight* w;
        int64_t rows;
        float* y = nullptr;
        int ld = 0;
    } proj[4] = {{&w.qkv, cd}, {&w.gate, vd}, {&w.beta, nv}, {&w.alpha, nv}};
    Impl::Buf proj_buf(*impl_, keep.proj ? 256 : (size_t)T * (cd + vd + 2 * nv) * sizeof(float));
    {
        Impl::OpScope step(*impl_, "gdn_block in_proj");
        float* next = keep.proj ? keep.proj : proj_buf.as<float>();
        const int stride_tokens = keep.proj ? keep.tokens : T;   // rows between one group's block and the next's
        for (int i = 0; i < 4;) {
            const Weight& first = *proj[i].w;
            int j = i + 1;
            int64_t rows = proj[i].rows;
            while (j < 4 && proj[j].w->type == first.type && proj[j].w->row_bytes == first.row_bytes &&
                   impl_->dev(*proj[j].w) == impl_->dev(first) + rows * first.row_bytes) {
                rows += proj[j].rows;
                ++j;
            }
            if (!replay) {
                cuda::MatmulArgs m = args(first);
                m.rows = rows;
                impl_->matmul_rows(m, u, T, T, next);
            }
            for (int k = i, col = 0; k < j; col += (int)proj[k].rows, ++k) {
                proj[k].y = next + col;
                proj[k].ld = (int)rows;
            }
            next += (size_t)stride_tokens * rows;
            i = j;
        }
    }
    Impl::Buf o(*impl_, (size_t)T * vd * sizeof(float));
    cuda::GdnGatedArgs a;
    a.nk = nk;
    a.nv = nv;
    a.d = d;
    const int oblk = cuda::act_block(w.out.type);
    a.qblk = y && impl_->gdn_quant && !impl_->f32_act && oblk && w.out.ne[0] == vd ? cuda::gdn_quantize_block(d, nv, oblk)
                                                                                   : 0;   // (y null: no out projection)
    // The conv and q/k norms inside the recurrence kernel where it can (one launch fewer), else gdn_conv_norm first.
    a.qkv = proj[0].y;
    a.ld_qkv = proj[0].ld;
    a.K = K;
    a.conv_w = impl_->dev_f32(w.conv1d);
    a.hist = conv_hist;
    const bool fold_conv = cuda::gdn_conv_fold_supported(a);
    if (fold_conv) ++gdn_fold_count;
    Impl::Buf conv(*impl_, fold_conv ? 256 : (size_t)T * cd * sizeof(float));
    if (!fold_conv) {
        Impl::OpScope step(*impl_, "gdn_block conv_norm");
        cuda::gdn_conv_norm(impl_->stream, proj[0].y, proj[0].ld, T, nk, nv, d, a.conv_w, K, conv_hist, conv.as<float>());
        a.conv = conv.as<float>();
    }
    {
        Impl::OpScope step(*impl_, fold_conv ? "gdn_block conv_recurrent_gated" : "gdn_block recurrent_gated");
        a.z = proj[1].y;
        a.ld_z = proj[1].ld;
        a.beta = proj[2].y;
        a.ld_beta = proj[2].ld;
        a.alpha = proj[3].y;
        a.ld_alpha = proj[3].ld;
        a.dt_bias = impl_->dev_f32(w.dt_bias);
        a.a = impl_->dev_f32(w.a);
        a.norm = impl_->dev_f32(w.norm);
        a.norm_len = (int)values(w.norm);
        a.eps = s.rms_eps;
        // o quantized in the kernel for the out projection: handed to matmul_rows as its cached quantization.
        if (a.qblk) {
            impl_->drop_act_cache();
            a.q = static_cast<int8_t*>(impl_->scratch->get((size_t)T * vd));
            a.qd = static_cast<float*>(impl_->scratch->get((size_t)T * (vd / a.qblk) * sizeof(float)));
        }
        cuda::gdn_recurrent_gated(impl_->stream, a, T, S, o.as<float>());
        if (a.qblk) {
            impl_->act_cache = Impl::ActCache{o.as<float>(), T, vd, a.qblk, impl_->act_epoch, a.q, a.qd};
            ++gdn_quant_count;
        }
    }
    if (y) {   // (null: the carried state only, Qwen4Exp::replay)
        Impl::OpScope step(*impl_, "gdn_block out_proj");
        impl_->matmul_rows(args(w.out), o.as<float>(), T, T, y);
    }
    impl_->done("gdn_block");
}

int64_t CudaBackend::fused_gdn_blocks() { return fused_gdn_count.load(); }
int64_t CudaBackend::gdn_quantized_outputs() { return gdn_quant_count.load(); }
int64_t CudaBackend::gdn_conv_folds() { return gdn_fold_count.load(); }
void CudaBackend::set_gdn_conv_fold(int mode) { cuda::gdn_set_conv_fold(mode); }

}  // namespace strata
