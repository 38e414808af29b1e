// CudaBackend's MoE ops: route_topk, moe_experts (tiled, decode-fused, expert cache, device join), the shared expert,
// and the hybrid path's questions (moe_on_host, device_join).
#include "backend/cuda/cuda_backend_impl.h"

#include "backend/cuda/kernels/matmul_tiled.h"
#include "backend/cuda/kernels/moe_gate_up.h"
#include "backend/cuda/kernels/shared_expert.h"
#include "common/env.h"

namespace strata {

bool CudaBackend::moe_on_host(int T, int k) const {
    return impl_->hybrid && impl_->hybrid->caching() && !device_join(T, k);
}

// The hybrid MoE call joins on the device (HybridMoe::plan_device + moe_decode over its tables + join_device).
bool CudaBackend::device_join(int T, int k) const {
    return impl_->fused_moe && !impl_->f32_act && impl_->hybrid->device_path(T, k);
}

void CudaBackend::route_topk(const float* logits, int T, int E, int k, int32_t* ids, float* weights) {
    Impl::OpScope prof_op(*impl_, "route_topk");
    cuda::route_topk(impl_->stream, logits, T, E, k, ids, weights);
    impl_->wrote(ids, (size_t)T * k * 4);
    impl_->wrote(weights, (size_t)T * k * 4);
    impl_->done("route_topk", true);
}

void CudaBackend::moe_experts(const MoeWeights& w, const float* x, int T, int k, const int32_t* d_ids,
                              const float* d_w, float* y) {
    Impl::OpScope prof_op(*impl_, "moe_experts");
    const int H = (int)w.gate_exps.ne[0], I = (int)w.gate_exps.ne[1], E = (int)w.gate_exps.ne[2];
    const int P = T * k;   // (token, expert) pairs
    if (!P) return;
    if (impl_->hybrid && !impl_->hybrid->caching()) {
        impl_->hybrid->count_routing(w, d_ids, P, impl_->stream);   // a routing profile only: counted on the device
    } else if (impl_->hybrid && impl_->hybrid->handles(w) && device_join(T, k)) {
        // Decode-sized: the plan picks each pair's matrix (slot, zero-copy host memory, or the CPU's) on the GPU.
        const auto tables = impl_->hybrid->plan_device(w, x, T, k, d_ids, d_w);
        auto args = [&](const Weight& e, int rows, int n, int act_div, const uint8_t* const* mats) {
            cuda::MatmulArgs m;
            m.type = e.type;
            m.row_bytes = e.row_bytes;
            m.rows = rows;
            m.n = n;
            m.act_div = act_div;
            m.mats = mats;
            return m;
        };
        const cuda::MatmulArgs ga = args(w.gate_exps, I, H, k, tables[0]), ua = args(w.up_exps, I, H, k, tables[1]),
                               da = args(w.down_exps, H, I, 1, tables[2]);
        STRATA_CHECK(cuda::moe_decode_supported(ga, ua, da, P), "cuda: the device-joined MoE path does not take ",
                     ggml_type_name(w.gate_exps.type), " / ", ggml_type_name(w.down_exps.type), " experts");
        const size_t bytes = cuda::moe_decode_scratch_bytes(P, I);
        Impl::Buf scratch(*impl_, bytes);
        cuda::moe_decode(impl_->stream, ga, ua, da, impl_->quantized(x, T, H, cuda::act_block(w.gate_exps.type)), x,
                         d_w, T, k, scratch.p, bytes, y);
        ++fused_gate_up_count;
        if (w.gate_shexp.present()) impl_->pending_join = Impl::PendingJoin{y, T};
        else impl_->hybrid->join_device(y, T);
        impl_->done("moe_experts (device join)");
        return;
    } else if (impl_->hybrid && impl_->hybrid->handles(w)) {
        // The expert cache reads the routing on the host: one copy back and a wait.
        STRATA_CHECK(!impl_->capturing, "cuda: the expert cache's moe_experts inside a graph capture");
        auto* host = static_cast<uint32_t*>(impl_->route_host.get((size_t)2 * P * 4));
        CUDA_CHECK(cudaMemcpyAsync(host, d_ids, (size_t)P * 4, cudaMemcpyDeviceToHost, impl_->stream));
        CUDA_CHECK(cudaMemcpyAsync(host + P, d_w, (size_t)P * 4, cudaMemcpyDeviceToHost, impl_->stream));
        impl_->hybrid->input_to_host(w, x, T);   // a CPU job can start at once
        CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
        const int32_t* ids = reinterpret_cast<const int32_t*>(host);
        const float* weights = reinterpret_cast<const float*>(host + P);
        for (int p = 0; p < P; ++p)
            STRATA_CHECK(ids[p] >= 0 && ids[p] < E, "cuda moe: expert id ", ids[p], " is outside 0..", E - 1);
        // The shared expert's matmuls run while the CPU computes the misses (shared_expert then only adds).
        impl_->hybrid->moe_experts(w, x, T, k, ids, weights, y, [&] { shared_expert(w, x, T, nullptr); });
        impl_->done("moe_experts (expert cache)");
        return;
    }

    Impl::Buf gate(*impl_, (size_t)P * I * 4), up(*impl_, (size_t)P * I * 4), down(*impl_, (size_t)P * H * 4);
    auto expert_args = [&](const Weight& e, int rows, int n, int act_div) {
        cuda::MatmulArgs m;
        m.type = e.type;
        m.w = impl_->dev(e);
        m.row_bytes = e.row_bytes;
        m.rows = rows;
        m.n = n;
        m.mat_stride = (size_t)rows * e.row_bytes;
        m.ids = d_ids;
        m.act_div = act_div;
        return m;
    };
    // Prompt-sized T: pairs sorted by expert on the device, each expert's rows decoded once per tile of its pairs.
    const bool tiled = T >= cuda::kTiledMinRows && cuda::tiled_enabled() && E <= cuda::kMaxTiledExperts &&
                       cuda::tiled_supported(w.gate_exps.type, H) && cuda::tiled_supported(w.up_exps.type, H) &&
                       cuda::tiled_supported(w.down_exps.type, I);
    Impl::Buf sort_scratch(*impl_, tiled ? cuda::expert_order_bytes(P, E) : 1);
    cuda::ExpertOrder order;
    if (tiled) order = cuda::sort_by_expert(impl_->stream, d_ids, P, E, sort_scratch.p);
    const cuda::ExpertOrder* by_expert = tiled ? &order : nullptr;
    // Decode sizes: gate+up+swiglu+quantize h, then down+weighted sum: two launches (cuda::moe_decode; gate as scratch).
    const bool decode = !tiled && impl_->fused_moe && !impl_->f32_act &&
                        cuda::moe_decode_supported(expert_args(w.gate_exps, I, H, k), expert_args(w.up_exps, I, H, k),
                                                   expert_args(w.down_exps, H, I, 1), P);
    if (tiled) {
        impl_->matmul_rows(expert_args(w.gate_exps, I, H, k), x, T, P, gate.as<float>(), by_expert);
        impl_->matmul_rows(expert_args(w.up_exps, I, H, k), x, T, P, up.as<float>(), by_expert);
        cuda::swiglu(impl_->stream, gate.as<float>(), up.as<float>(), (size_t)P * I, gate.as<float>());
    } else if (decode) {
        cuda::moe_decode(impl_->stream, expert_args(w.gate_exps, I, H, k), expert_args(w.up_exps, I, H, k),
                         expert_args(w.down_exps, H, I, 1), impl_->quantized(x, T, H, cuda::act_block(w.gate_exps.type)),
                         x, d_w, T, k, gate.p, (size_t)P * I * 4, y);
        ++fused_gate_up_count;
    } else {
        impl_->gate_up(expert_args(w.gate_exps, I, H, k), expert_args(w.up_exps, I, H, k), x, T, P, gate.as<float>());
    }
    // Keep x's quantized form for the shared expert that follows (the down projection replaces act_cache).
    Impl::ActCache& c = impl_->act_cache;
    const bool keep_x = !tiled && impl_->fused_moe && c.q && c.x == x && c.rows == T && c.epoch == impl_->act_epoch;
    if (keep_x) {
        impl_->drop_moe_input();
        impl_->moe_input.act = c;
        c = Impl::ActCache{};
    }
    if (!decode) {
        impl_->matmul_rows(expert_args(w.down_exps, H, I, 1), gate.as<float>(), P, P, down.as<float>(), by_expert);
        cuda::moe_combine(impl_->stream, down.as<float>(), d_w, T, k, H, y);
    }
    impl_->done("moe_experts");
    const uint8_t* yb = reinterpret_cast<const uint8_t*>(y);
    const uint8_t* xb = reinterpret_cast<const uint8_t*>(x);
    const size_t x_bytes = (size_t)T * H * sizeof(float);
    if (keep_x && !(yb < xb + x_bytes && xb < yb + x_bytes)) impl_->moe_input.after_ops = impl_->ops;
}

void CudaBackend::shared_expert(const MoeWeights& w, const float* u, int T, float* y) {
    Impl::PendingJoin join = impl_->pending_join;
    impl_->pending_join = Impl::PendingJoin{};
    if (join.y && join.y != y) impl_->hybrid->join_device(join.y, join.T);   // not this output: join first
    shared_expert_into(w, u, T, y);
    if (join.y == y && y) impl_->hybrid->join_device(y, join.T);
}

void CudaBackend::shared_expert_into(const MoeWeights& w, const float* u, int T, float* y) {
    Impl::OpScope prof_op(*impl_, "shared_expert");
    const int H = (int)w.down_shexp.n_rows(), Is = (int)w.gate_shexp.n_rows();
    const bool fused = impl_->fused_moe && T > 0 && T < cuda::kTiledMinRows && w.shexp_gate_inp.type == GgmlType::F32 &&
                       w.shexp_gate_inp.ne[0] == H && w.shexp_gate_inp.n_rows() == 1 && w.gate_shexp.ne[0] == H;
    // y null (the hybrid join, before it waits for the CPU): the output is computed and kept for the next call.
    Impl::EarlyShexp& early = impl_->early_shexp;
    if (!y) {
        if (early.sh) impl_->scratch->put(early.sh);
        early = Impl::EarlyShexp{};
        if (!fused) return;
    } else if (!fused) {
        Backend::shared_expert(w, u, T, y);
        return;
    }
    const float* g = reinterpret_cast<const float*>(impl_->dev(w.shexp_gate_inp));
    if (y && early.sh && early.w == &w && early.u == u && early.T == T) {
        cuda::shexp_gated_add(impl_->stream, u, g, static_cast<const float*>(early.sh), T, H, y);
        impl_->scratch->put(early.sh);
        early = Impl::EarlyShexp{};
        impl_->done("shared_expert");
        return;
    }
    auto args = [&](const Weight& m) { return impl_->dense_args(m); };
    // T = 1 only: at T = 8 it was 6.4e-4 off the CPU (tolerance 2e-4) on the H200 (tests/gpu/results/2026-11-30-round2).
    // (Verify windows usually take moe_experts_with_shared's merged launches, checked per token by moe_window_bits.)
    if (y && T == 1 && !impl_->f32_act &&
        cuda::moe_decode_supported(args(w.gate_shexp), args(w.up_shexp), args(w.down_shexp), T)) {
        // gate+up+swiglu+quantize h with the sigmoid gate, then down+gated add: two launches (cuda::shexp_decode).
        const size_t bytes = cuda::moe_decode_scratch_bytes(T, Is);
        Impl::Buf scratch(*impl_, bytes);
        cuda::shexp_decode(impl_->stream, args(w.gate_shexp), args(w.up_shexp), args(w.down_shexp),
                           impl_->quantized(u, T, H, cuda::act_block(w.gate_shexp.type)), u, g, T, scratch.p, bytes, y);
        ++fused_gate_up_count;
        impl_->done("shared_expert");
        return;
    }
    Impl::Buf h(*impl_, (size_t)T * Is * sizeof(float));
    float* sh = static_cast<float*>(impl_->scratch->get((size_t)T * H * sizeof(float)));
    impl_->gate_up(args(w.gate_shexp), args(w.up_shexp), u, T, T, h.as<float>());
    impl_->matmul_rows(args(w.down_shexp), h.as<float>(), T, T, sh);
    if (!y) {
        early = Impl::EarlyShexp{&w, u, T, sh};
        return;
    }
    cuda::shexp_gated_add(impl_->stream, u, g, sh, T, H, y);
    impl_->scratch->put(sh);
    impl_->done("shared_expert");
}

void CudaBackend::moe_experts_with_shared(const MoeWeights& w, const float* x, int T, int k, const int32_t* d_ids,
                                          const float* d_w, float* y) {
    static const bool merge_on = env_switch("STRATA_CUDA_MERGE_SHEXP", true);
    const int H = (int)w.gate_exps.ne[0], I = (int)w.gate_exps.ne[1];
    Impl& im = *impl_;
    cuda::HybridMoe* hybrid = im.hybrid.get();
    const bool joined = hybrid && hybrid->caching() && hybrid->handles(w) && device_join(T, k);
    // At one token, and for a verify window whose pairs fit the decode kernels (each token then as at one token).
    const bool merge = merge_on && k > 0 && T * (k + 1) <= cuda::kMoeDecodeMaxPairs && im.fused_moe && !im.f32_act &&
                       w.gate_shexp.present() && w.shexp_gate_inp.type == GgmlType::F32 &&
                       w.shexp_gate_inp.ne[0] == H && w.shexp_gate_inp.n_rows() == 1 &&
                       (!hybrid || !hybrid->caching() || joined);
    if (!merge) {   // (the routed experts may not be on the device: an expert cache that joins on the host)
        Backend::moe_experts_with_shared(w, x, T, k, d_ids, d_w, y);
        return;
    }
    auto expert_args = [&](const Weight& e, int rows, int n, int act_div) {
        cuda::MatmulArgs m;
        m.type = e.type;
        m.w = joined ? nullptr : im.dev(e);
        m.row_bytes = e.row_bytes;
        m.rows = rows;
        m.n = n;
        m.mat_stride = joined ? 0 : (size_t)rows * e.row_bytes;
        m.ids = joined ? nullptr : d_ids;
        m.act_div = act_div;
        return m;
    };
    cuda::MatmulArgs ga = expert_args(w.gate_exps, I, H, k), ua = expert_args(w.up_exps, I, H, k),
                     da = expert_args(w.down_exps, H, I, 1);
    const cuda::MatmulArgs sg = im.dense_args(w.gate_shexp), su = im.dense_args(w.up_shexp),
                           sd = im.dense_args(w.down_shexp);
    static const uint8_t* const kNoTable[1] = {nullptr};
    if (joined) ga.mats = ua.mats = da.mats = kNoTable;   // tables stand in for w + ids: the plan's, set below
    if (!cuda::moe_shexp_decode_supported(ga, ua, da, sg, su, sd, T, k)) {
        Backend::moe_experts_with_shared(w, x, T, k, d_ids, d_w, y);
        return;
    }
    Impl::OpScope prof_op(im, "moe_experts+shared");
    if (hybrid && !hybrid->caching()) hybrid->count_routing(w, d_ids, T * k, im.stream);   // a routing profile only
    if (joined) {   // each pair's matrix (slot, zero-copy host memory, or the CPU's) picked on the GPU
        const auto tables = hybrid->plan_device(w, x, T, k, d_ids, d_w);
        ga.mats = tables[0];
        ua.mats = tables[1];
        da.mats = tables[2];
    }
    const size_t bytes = cuda::moe_decode_scratch_bytes(T * (k + 1), I);
    Impl::Buf scratch(im, bytes);
    const float* gvec = reinterpret_cast<const float*>(im.dev(w.shexp_gate_inp));
    cuda::moe_shexp_decode(im.stream, ga, ua, da, sg, su, sd, gvec, im.moe_act(x, T, H, cuda::act_block(ga.type)), x,
                           d_w, T, k, scratch.p, bytes, y);
    ++fused_gate_up_count;
    if (joined) hybrid->join_device(y, T);   // the CPU's pairs, added on the device
    im.wrote(y, (size_t)T * H * sizeof(float));
    im.done("moe_experts+shared");
}

int64_t CudaBackend::fused_gate_ups() { return fused_gate_up_count.load(); }

}  // namespace strata
