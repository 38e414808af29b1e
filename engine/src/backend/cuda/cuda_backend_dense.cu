// CudaBackend's dense ops: embed, matmul, norms, elementwise and row/column ops, the PLE gate, the
// hyper-connection ops (hyper_mix, hyper_inject, hyper_read) and rope.
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/kernels/t1_variants.h"

namespace strata {

void CudaBackend::embed(const Weight& table, const int32_t* ids, int T, float* y) {
    Impl::OpScope prof_op(*impl_, "embed");
    if (impl_->hybrid && impl_->hybrid->trace() && T <= 8)   // a decode pass's start (STRATA_HYBRID_TRACE)
        impl_->hybrid->trace()->stamp_on_stream(impl_->stream, cuda::HybridTrace::kPassEmbed);
    cuda::dequant_rows(impl_->stream, table.type, impl_->dev(table), table.row_bytes, (int)table.ne[0], ids, T, y);
    impl_->done("embed");
}

void CudaBackend::matmul(const Weight& w, const float* x, int T, float* y) {
    Impl::OpScope prof_op(*impl_, "matmul", ggml_type_name(w.type));
    impl_->matmul_rows(impl_->dense_args(w), x, T, T, y);
    impl_->done("matmul", true);
}

void CudaBackend::rms_norm(const float* x, const Weight* w, int rows, int width, int group, float eps, float* y) {
    Impl::OpScope prof_op(*impl_, "rms_norm");
    const float* wf = w ? impl_->dev_f32(*w) : nullptr;
    const int w_len = w ? (int)(w->ne[0] * w->n_rows()) : 0;
    cuda::rms_norm(impl_->stream, x, wf, w_len, rows, width, group, eps, y);
    impl_->done("rms_norm");
}

void CudaBackend::l2_norm(const float* x, int rows, int width, int group, float eps, float scale, float* y) {
    Impl::OpScope prof_op(*impl_, "l2_norm");
    cuda::l2_norm(impl_->stream, x, rows, width, group, eps, scale, y);
    impl_->done("l2_norm");
}

void CudaBackend::unary(Unary f, const float* x, size_t n, float scale, float* y) {
    Impl::OpScope prof_op(*impl_, "unary");
    cuda::unary(impl_->stream, f, x, n, scale, y);
    impl_->done("unary");
}

void CudaBackend::mul(const float* a, const float* b, size_t n, float* y) {
    Impl::OpScope prof_op(*impl_, "mul");
    cuda::mul(impl_->stream, a, b, n, y);
    impl_->done("mul");
}

void CudaBackend::add(float* y, const float* x, size_t n) {
    Impl::OpScope prof_op(*impl_, "add");
    cuda::add(impl_->stream, y, x, n);
    impl_->done("add");
}

void CudaBackend::scale(float* x, size_t n, float s) {
    Impl::OpScope prof_op(*impl_, "scale");
    cuda::scale(impl_->stream, x, n, s);
    impl_->done("scale");
}

void CudaBackend::add_row(float* x, int T, int width, const Weight& v) {
    Impl::OpScope prof_op(*impl_, "add_row");
    STRATA_CHECK(v.ne[0] * v.n_rows() == width, "cuda add_row: weight ", v.tensor ? v.tensor->name : "", " has ",
                 v.ne[0] * v.n_rows(), " values for a row of ", width);
    cuda::row_op(impl_->stream, false, x, T, width, impl_->dev_f32(v));
    impl_->done("add_row");
}

void CudaBackend::mul_row(float* x, int T, int width, const Weight& v) {
    Impl::OpScope prof_op(*impl_, "mul_row");
    STRATA_CHECK(v.ne[0] * v.n_rows() == width, "cuda mul_row: weight ", v.tensor ? v.tensor->name : "", " has ",
                 v.ne[0] * v.n_rows(), " values for a row of ", width);
    cuda::row_op(impl_->stream, true, x, T, width, impl_->dev_f32(v));
    impl_->done("mul_row");
}

void CudaBackend::slice_cols(const float* x, int T, int width, int c0, int nc, float* y) {
    Impl::OpScope prof_op(*impl_, "slice_cols");
    cuda::slice_cols(impl_->stream, x, T, width, c0, nc, y);
    impl_->done("slice_cols");
}

void CudaBackend::concat_cols(const float* a, const float* b, int rows, int wa, int wb, float* y) {
    Impl::OpScope prof_op(*impl_, "concat_cols");
    cuda::concat_cols(impl_->stream, a, b, rows, wa, wb, y);
    impl_->done("concat_cols");
}

void CudaBackend::deinterleave(const float* x, int T, int n_heads, int la, int lb, float* a, float* b) {
    Impl::OpScope prof_op(*impl_, "deinterleave");
    cuda::deinterleave(impl_->stream, x, T, n_heads, la, lb, a, b);
    impl_->done("deinterleave");
}

void CudaBackend::mean_rows(const float* x, int rows, int width, float* y) {
    Impl::OpScope prof_op(*impl_, "mean_rows");
    cuda::mean_rows(impl_->stream, x, rows, width, y);
    impl_->done("mean_rows");
}

void CudaBackend::repeat_streams(const float* e, int T, int n, int H, float* X) {
    Impl::OpScope prof_op(*impl_, "repeat_streams");
    cuda::repeat_streams(impl_->stream, e, T, n, H, X);
    impl_->done("repeat_streams");
}

void CudaBackend::ple_gate(const float* K, const float* Q, const float* v, int T, int n, int H, float* gv) {
    Impl::OpScope prof_op(*impl_, "ple_gate");
    cuda::ple_gate(impl_->stream, K, Q, v, T, n, H, gv);
    impl_->done("ple_gate");
}

void CudaBackend::hyper_mix(const float* xn, const float* m, int T, int n, int H, float* u) {
    Impl::OpScope prof_op(*impl_, "hyper_mix");
    cuda::hyper_mix(impl_->stream, xn, m, T, n, H, u);
    impl_->done("hyper_mix");
}

void CudaBackend::hyper_inject(float* X, const float* inj, const float* y, int T, int n, int H) {
    Impl::OpScope prof_op(*impl_, "hyper_inject");
    cuda::hyper_inject(impl_->stream, X, inj, y, T, n, H);
    impl_->done("hyper_inject");
}

bool CudaBackend::Impl::hyper_read_args(const HyperWeights& w, int n, int H, float eps, bool with_inj,
                                        cuda::HyperReadArgs& a) {
    a.norm = dev_f32(w.norm);
    a.norm_len = (int)(w.norm.ne[0] * w.norm.n_rows());
    a.down_type = w.down.type;
    a.down = dev(w.down);
    a.down_rb = w.down.row_bytes;
    if (with_inj) {
        a.inject_type = w.inject.type;
        a.inject = dev(w.inject);
        a.inject_rb = w.inject.row_bytes;
    }
    a.up_type = w.up.type;
    a.up = dev(w.up);
    a.up_rb = w.up.row_bytes;
    a.n = n;
    a.H = H;
    a.r = (int)w.down.n_rows();
    a.eps = eps;
    a.f32_act = f32_act;
    const int64_t nH = (int64_t)n * H;
    return w.up.ne[0] == a.r && w.up.n_rows() == nH && w.down.ne[0] == nH && a.norm_len == nH &&
           (!with_inj || (w.inject.ne[0] == nH && w.inject.n_rows() == n));
}

void CudaBackend::hyper_read(const HyperWeights& w, const float* X, int T, int n, int H, float eps, float* u,
                             float* inj) {
    Impl::OpScope prof_op(*impl_, "hyper_read");
    cuda::HyperReadArgs a;
    if (!impl_->hyper_read_args(w, n, H, eps, inj != nullptr, a) || !cuda::hyper_read_supported(a, T)) {
        Backend::hyper_read(w, X, T, n, H, eps, u, inj);
        return;
    }
    Impl::Buf scratch(*impl_, cuda::hyper_read_scratch_bytes(a, T));
    Impl& im = *impl_;
    cuda::hyper_read(im.stream, a, X, T, scratch.p, u, inj);
    im.done("hyper_read");
}

void CudaBackend::hyper_inject_read(float* X, const float* inj_prev, const float* y, const HyperWeights& w, int T,
                                    int n, int H, float eps, float* u, float* inj) {
    Impl::OpScope prof_op(*impl_, "hyper_inject_read");
    cuda::HyperReadArgs a;
    if (!impl_->hyper_read_args(w, n, H, eps, inj != nullptr, a) || !cuda::hyper_read_supported(a, T)) {
        Backend::hyper_inject_read(X, inj_prev, y, w, T, n, H, eps, u, inj);
        return;
    }
    Impl::Buf scratch(*impl_, cuda::hyper_read_scratch_bytes(a, T));
    Impl& im = *impl_;
    cuda::hyper_inject_read(im.stream, a, X, inj_prev, y, T, scratch.p, u, inj);
    im.done("hyper_inject_read");
}

int64_t CudaBackend::folded_injections() { return cuda::hyper_inject_read_folded_calls(); }
int64_t CudaBackend::fused_hyper_reads() { return cuda::hyper_read_fused_calls(); }
int64_t CudaBackend::q6k_t1_matmuls() { return cuda::matmul_q6k_t1_calls(); }
int64_t CudaBackend::t1_staged_matmuls() { return cuda::matmul_t1_staged_calls(); }
void CudaBackend::set_prompt_mmq(int mode) { cuda::tiled_set_mmq(mode); }
int64_t CudaBackend::prompt_mmq_matmuls() { return cuda::tiled_mmq_calls(); }

void CudaBackend::rope(float* x, int T, int n_heads, int hd, int n_rot, float theta, const int32_t* pos) {
    Impl::OpScope prof_op(*impl_, "rope");
    cuda::rope(impl_->stream, x, T, n_heads, hd, n_rot, theta, pos, 0);
    impl_->done("rope");
}

void CudaBackend::rope_multi(float* x, int T, int n_heads, int hd, int n_rot, float theta, const int32_t* pos3,
                             int sec_h, int sec_w) {
    Impl::OpScope prof_op(*impl_, "rope_multi");
    cuda::rope_multi(impl_->stream, x, T, n_heads, hd, n_rot, theta, pos3, sec_h, sec_w);
    impl_->done("rope_multi");
}

}  // namespace strata
