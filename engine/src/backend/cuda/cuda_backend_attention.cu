// CudaBackend's attention ops: the heads' norms and rotation (qsa_heads), KV row writes (scatter_rows), pooled
// indexer keys, attention over dense or listed cells, indexer scores, cell selection and the output gate.
#include <atomic>

#include "backend/cuda/cuda_backend_impl.h"
#include "common/env.h"

namespace strata {

namespace {
std::atomic<int64_t> g_fused_qsa_heads{0};
}  // namespace

void CudaBackend::qsa_heads(const float* qg, float* q, float* gate, float* k, float* qi, const Weight& q_norm,
                            const Weight& k_norm, const Weight* qi_norm, int T, int nh, int nkv, int hd, int ni, int di,
                            float eps, int n_rot, float theta, const int32_t* pos) {
    static const bool fused = env_switch("STRATA_CUDA_QSA_HEADS", true);
    Impl::OpScope prof_op(*impl_, "qsa_heads");
    auto heads = [&](const float* src, float* dst, const Weight* norm, int n, int d) {
        cuda::QsaHeadsArgs::Heads h;
        if (!norm) return h;
        h.src = src;
        h.dst = dst;
        h.norm = impl_->dev_f32(*norm);
        h.norm_len = (int)(norm->ne[0] * norm->n_rows());
        h.n = n;
        h.hd = d;
        return h;
    };
    cuda::QsaHeadsArgs a;
    a.q = heads(qg, q, &q_norm, nh, hd);
    a.k = heads(k, k, &k_norm, nkv, hd);
    a.qi = heads(qi, qi, qi_norm, ni, di);
    a.gate = gate;
    a.pos = pos;
    a.T = T;
    a.n_rot = n_rot;
    a.eps = eps;
    a.theta = theta;
    if (fused && cuda::qsa_heads(impl_->stream, a)) {
        g_fused_qsa_heads.fetch_add(1, std::memory_order_relaxed);
        impl_->done("qsa_heads");
        return;
    }
    Backend::qsa_heads(qg, q, gate, k, qi, q_norm, k_norm, qi_norm, T, nh, nkv, hd, ni, di, eps, n_rot, theta, pos);
}

int64_t CudaBackend::fused_qsa_heads() { return g_fused_qsa_heads.load(); }

void CudaBackend::sigmoid_gate(float* o, float* gate, size_t n) {
    Impl::OpScope prof_op(*impl_, "sigmoid_gate");
    cuda::sigmoid_gate(impl_->stream, o, gate, n);
    impl_->done("sigmoid_gate");
}

void CudaBackend::write_kv(float* cache, const float* src, int T, int width, const int32_t* pos) {
    if (kv_type() == KvType::f32) return scatter_rows(cache, src, T, width, pos);
    Impl::OpScope prof_op(*impl_, "write_kv");
    if (kv_type() == KvType::f16)
        cuda::scatter_rows_f16(impl_->stream, reinterpret_cast<uint16_t*>(cache), src, T, width, pos);
    else
        cuda::scatter_rows_q8(impl_->stream, reinterpret_cast<uint8_t*>(cache), src, T, width, pos);
    impl_->done("write_kv");
}

void CudaBackend::scatter_rows(float* dst, const float* src, int T, int width, const int32_t* pos) {
    Impl::OpScope prof_op(*impl_, "scatter_rows");
    cuda::scatter_rows(impl_->stream, dst, src, T, width, pos);
    impl_->done("scatter_rows");
}

void CudaBackend::pool_key_blocks(const float* kraw, float* kblock, const int32_t* pos, int T, int cr, int di,
                                  const Weight& norm, float eps, int n_rot, float theta) {
    Impl::OpScope prof_op(*impl_, "pool_key_blocks");
    const int norm_len = (int)(norm.ne[0] * norm.n_rows());
    cuda::pool_key_blocks(impl_->stream, kraw, kblock, pos, T, cr, di, impl_->dev_f32(norm), norm_len, eps, n_rot,
                          theta);
    impl_->done("pool_key_blocks");
}

void CudaBackend::attention(const float* q, const float* K, const float* V, int T, int nh, int nkv, int hd,
                            const std::vector<std::vector<int32_t>>& keep, float* o) {
    Impl::OpScope prof_op(*impl_, "attention");
    STRATA_CHECK((int)keep.size() >= T, "cuda attention: ", keep.size(), " keep-lists for ", T, " queries");
    // The dense causal pattern (query t sees 0 … n0 + t − 1) needs no upload.
    const int n0 = T ? (int)keep[0].size() : 0;
    bool dense = true;
    for (int t = 0; t < T && dense; ++t) {
        dense = (int)keep[t].size() == n0 + t;
        for (int c = 0; dense && c < (int)keep[t].size(); ++c) dense = keep[t][c] == c;
    }
    if (dense) {
        cuda::attention(impl_->stream, q, K, V, T, nh, nkv, hd, nullptr, nullptr, n0, o);
    } else {
        std::vector<int32_t> flat(T + 1);
        for (int t = 0; t < T; ++t) flat[t + 1] = flat[t] + (int32_t)keep[t].size();
        for (int t = 0; t < T; ++t) flat.insert(flat.end(), keep[t].begin(), keep[t].end());
        Impl::Buf d_flat(*impl_, flat.size() * sizeof(int32_t));
        impl_->upload(d_flat.p, flat.data(), flat.size() * sizeof(int32_t));
        const int32_t* off = d_flat.as<int32_t>();
        cuda::attention(impl_->stream, q, K, V, T, nh, nkv, hd, off, off + T + 1, 0, o);
    }
    impl_->done("attention");
}

void CudaBackend::indexer_scores(const float* q, const float* kb, int T, const int32_t* pos, int cr, int ni, int di,
                                 float scale, float* s, int stride) {
    Impl::OpScope prof_op(*impl_, "indexer_scores");
    cuda::indexer_scores_rows(impl_->stream, q, kb, T, pos, cr, ni, di, scale, s, stride);
    impl_->done("indexer_scores");
}

void CudaBackend::select_cells(const float* scores, int stride, int T, const int32_t* pos, int cr, int kb,
                               const int32_t* off, int32_t* cells) {
    Impl::OpScope prof_op(*impl_, "select_cells");
    Impl::Buf scratch(*impl_, cuda::select_cells_scratch_bytes(T, stride));
    cuda::select_cells(impl_->stream, scores, stride, T, pos, cr, kb, off, cells, scratch.p);
    impl_->done("select_cells");
}

void CudaBackend::attention_cells(const float* q, const float* K, const float* V, int T, int nh, int nkv, int hd,
                                  const int32_t* off, const int32_t* cells, int max_cells, float* o) {
    Impl::OpScope prof_op(*impl_, "attention_cells");
    cuda::attention(impl_->stream, q, K, V, T, nh, nkv, hd, off, cells, 0, o, -1, -1, max_cells, kv_type());
    impl_->done("attention_cells");
}

}  // namespace strata
