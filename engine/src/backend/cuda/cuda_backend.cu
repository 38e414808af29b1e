// CudaBackend: construction, weight uploads (prepare_weights), device memory and host copies, graph capture
// plumbing, counts and info, make_cuda_backend. The ops are in cuda_backend_{dense,gdn,attention,moe}.cu, the state
// they share in cuda_backend_impl.h.
//
// Host data (to_device: PLE rows, ids, positions, offsets) goes through pinned staging without a wait; routing stays
// on the device. As a GraphCapture (backend/graph_capture.h) it captures runs of ops into CUDA graphs that
// GraphBackend launches again for later passes of the same shape (captured_graph.h). STRATA_CUDA_SYNC=1
// synchronises after every op (and turns graphs off), so an asynchronous fault names its op; STRATA_CUDA_PROFILE=1
// times every op with events (gpu_op_profile.h), prints a table at exit, and turns graphs off too.
#include "backend/cuda/cuda_backend_impl.h"

#include "backend/graph_backend.h"
#include "common/log.h"

namespace strata {

CudaBackend::CudaBackend(int device, bool f32_activations) : CudaBackend(device, [&] {
    GpuOptions o;
    o.f32_activations = f32_activations;
    return o;
}()) {}

CudaBackend::CudaBackend(int device, const GpuOptions& opt) : impl_(std::make_unique<Impl>()) {
    impl_->f32_act = opt.f32_activations;
    int count = 0;
    CUDA_CHECK(cudaGetDeviceCount(&count));
    STRATA_CHECK(device >= 0 && device < count, "cuda: device ", device, " does not exist (", count, " devices)");
    impl_->device = device;
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaMalloc(&impl_->argmax_state, cuda::argmax_state_bytes()));
    CUDA_CHECK(cudaMemset(impl_->argmax_state, 0, cuda::argmax_state_bytes()));
    impl_->prof = std::make_unique<cuda::GpuOpProfile>(impl_->stream);
    cuda::upload_iq_tables();
    cuda::hyper_read_upload_tables();
    cuda::tiled_upload_tables();
    const char* env = std::getenv("STRATA_CUDA_SYNC");
    impl_->sync_each_op = env && std::strcmp(env, "1") == 0;
    const char* graphs_env = std::getenv("STRATA_CUDA_GRAPHS");
    const bool graphs_wanted = !(graphs_env && std::strcmp(graphs_env, "0") == 0);
    if (!opt.expert_cache.empty() || !opt.routing_profile_out.empty()) {
        Impl* im = impl_.get();
        impl_->hybrid = std::make_unique<cuda::HybridMoe>(
            opt, impl_->stream, impl_->pool,
            [im](const cuda::MatmulArgs& m, const float* x, int act_rows, int P, float* y,
                 const cuda::ExpertOrder* order) {
                ++im->act_epoch;     // the hybrid path rewrites its gathered inputs between matmuls
                im->matmul_rows(m, x, act_rows, P, y, order);
            });
    }
    const char* gdn_env = std::getenv("STRATA_CUDA_FUSED_GDN");
    impl_->fused_gdn = !(gdn_env && std::strcmp(gdn_env, "0") == 0);
    const char* gdn_quant_env = std::getenv("STRATA_CUDA_GDN_QUANT");
    impl_->gdn_quant = !(gdn_quant_env && std::strcmp(gdn_quant_env, "0") == 0);
    const char* fused_env = std::getenv("STRATA_CUDA_FUSED_MOE");
    impl_->fused_moe = !(fused_env && std::strcmp(fused_env, "0") == 0);
    CUDA_CHECK(cudaMalloc(&impl_->zero_ids, cuda::kTiledMinRows * sizeof(int32_t)));
    CUDA_CHECK(cudaMemset(impl_->zero_ids, 0, cuda::kTiledMinRows * sizeof(int32_t)));
    // The profile's events time ops issued directly. (The hybrid path's MoE runs outside graphs: moe_on_host.)
    impl_->graphs_on = graphs_wanted && !impl_->sync_each_op && !impl_->prof->on();
    if (graphs_wanted && impl_->prof->on()) log_info("cuda", "STRATA_CUDA_PROFILE=1 turns CUDA graphs off");
}

CudaBackend::~CudaBackend() {
    try {
        impl_->prof->print();
    } catch (const std::exception& e) {
        log_warn("cuda", std::string("op profile: ") + e.what());
    }
    cudaStreamSynchronize(impl_->stream);
    impl_->prof.reset();
    impl_->hybrid.reset();
    impl_->drop_moe_input();
    cudaFree(impl_->zero_ids);
    cudaFree(impl_->argmax_state);
    for (auto& [host, up] : impl_->weights)
        if (up.owner) cudaFree(up.dev);
    for (auto& [host, d] : impl_->f32) cudaFree(d);
    cudaStreamDestroy(impl_->stream);
}

std::string CudaBackend::device_name() const {
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, impl_->device));
    return prop.name;
}

size_t CudaBackend::weight_bytes() const { return impl_->weight_bytes; }

void CudaBackend::synchronize() {
    CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
    impl_->prof->synced();
}

// The profile's pass (host enqueue against GPU time) starts where a graph pass would.
bool CudaBackend::begin_graph() {
    impl_->prof->pass_begin();
    if (impl_->hybrid) impl_->hybrid->between_passes();   // cache moves land and start only between passes
    return false;
}

GraphCapture* CudaBackend::graph_capture() { return impl_->graphs_on ? this : nullptr; }

void CudaBackend::capture_begin(size_t upload_bytes) {
    STRATA_CHECK(!impl_->capturing, "cuda: a graph capture is already open");
    auto g = std::make_unique<cuda::CapturedGraph>(upload_bytes);
    impl_->drop_op_caches();                     // into the pool, before the graph's own scratch takes over
    CUDA_CHECK(cudaStreamBeginCapture(impl_->stream, cudaStreamCaptureModeRelaxed));   // relaxed: cudaMalloc inside
    impl_->capturing = g.release();
    impl_->scratch = &impl_->capturing->scratch();
}

GraphCapture::Exec CudaBackend::capture_end() {
    STRATA_CHECK(impl_->capturing, "cuda: no graph capture is open");
    std::unique_ptr<cuda::CapturedGraph> g(impl_->capturing);
    impl_->drop_op_caches();                     // back into the graph's scratch
    impl_->capturing = nullptr;
    impl_->scratch = &impl_->pool;
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamEndCapture(impl_->stream, &graph));
    try {
        g->instantiate(graph);
    } catch (...) {
        cudaGraphDestroy(graph);
        throw;
    }
    CUDA_CHECK(cudaGraphDestroy(graph));
    g->launch(impl_->stream);
    if (impl_->hybrid) impl_->hybrid->after_pass_issued();
    impl_->done("graph");
    if (!g->repeatable()) return nullptr;        // ran once; its scratch is freed after that run (destructor waits)
    return g.release();
}

bool CudaBackend::launch(Exec exec, const std::vector<GraphCapture::Upload>& uploads) {
    auto* g = static_cast<cuda::CapturedGraph*>(exec);
    std::vector<std::pair<const void*, size_t>> data;
    data.reserve(uploads.size());
    for (const GraphCapture::Upload& u : uploads) data.push_back({u.data, u.bytes});
    g->launch(impl_->stream, data);
    if (impl_->hybrid) {
        if (impl_->hybrid->trace()) impl_->hybrid->trace()->mark(cuda::HybridTrace::kMarkLaunched);
        impl_->hybrid->after_pass_issued();   // the cache's moves, while the GPU runs the pass
    }
    impl_->done("graph");
    return true;
}

void CudaBackend::destroy(Exec exec) { delete static_cast<cuda::CapturedGraph*>(exec); }

Backend::ExpertCacheCounts CudaBackend::expert_cache_counts() const {
    if (!impl_->hybrid) return {};
    const cuda::HybridCounters h = impl_->hybrid->counters();
    ExpertCacheCounts c;
    c.hits = h.hits;
    c.lookups = h.lookups;
    c.cpu_pairs = h.cpu_pairs;
    c.cpu_bytes = h.cpu_bytes;
    c.pcie_bytes = h.pcie_bytes;
    c.cpu_ms = h.cpu_ms;
    c.gpu_wait_ms = h.gpu_wait_ms;
    return c;
}

std::vector<std::pair<std::string, std::string>> CudaBackend::info() const {
    return impl_->hybrid ? impl_->hybrid->info() : std::vector<std::pair<std::string, std::string>>{};
}

void CudaBackend::upload_weight(const Weight& w) {
    if (!w.present() || !w.data) return;
    auto it = impl_->weights.upper_bound(w.data);
    if (it != impl_->weights.begin() && w.data < std::prev(it)->first + std::prev(it)->second.bytes) return;
    STRATA_CHECK(cuda::format_supported(w.type), "cuda: weight ", w.tensor->name, " has type ", ggml_type_name(w.type),
                 ", which the CUDA backend cannot read");
    const size_t bytes = w.row_bytes * (size_t)w.n_rows();
    uint8_t* d = nullptr;
    CUDA_CHECK(cudaMalloc(&d, bytes));
    CUDA_CHECK(cudaMemcpy(d, w.data, bytes, cudaMemcpyHostToDevice));
    impl_->weights[w.data] = Impl::Upload{bytes, d};
    impl_->weight_bytes += bytes;
}

void CudaBackend::upload_together(std::initializer_list<const Weight*> list) {
    std::vector<const Weight*> ws;
    for (const Weight* w : list) {
        if (!w->present() || !w->data) return;
        auto it = impl_->weights.upper_bound(w->data);
        if (it != impl_->weights.begin() && w->data < std::prev(it)->first + std::prev(it)->second.bytes) return;
        ws.push_back(w);
    }
    for (size_t i = 0; i < ws.size();) {
        size_t j = i + 1, bytes = ws[i]->row_bytes * (size_t)ws[i]->n_rows();
        while (j < ws.size() && ws[j]->type == ws[i]->type && ws[j]->row_bytes == ws[i]->row_bytes) {
            bytes += ws[j]->row_bytes * (size_t)ws[j]->n_rows();
            ++j;
        }
        if (j - i == 1 || !cuda::format_supported(ws[i]->type)) {
            upload_weight(*ws[i]);
            ++i;
            continue;
        }
        uint8_t* d = nullptr;
        CUDA_CHECK(cudaMalloc(&d, bytes));
        size_t off = 0;
        for (size_t k = i; k < j; ++k) {
            const size_t b = ws[k]->row_bytes * (size_t)ws[k]->n_rows();
            CUDA_CHECK(cudaMemcpy(d + off, ws[k]->data, b, cudaMemcpyHostToDevice));
            impl_->weights[ws[k]->data] = Impl::Upload{b, d + off, k == i};
            off += b;
        }
        impl_->weight_bytes += bytes;
        i = j;
    }
}

namespace {
template <class Fn>
void visit_hyper(const HyperWeights& h, Fn&& fn) {
    for (const Weight* w : {&h.norm, &h.down, &h.up, &h.inject}) fn(*w);
}

template <class Fn>
void visit_layer(const LayerWeights& L, Fn&& fn) {
    visit_hyper(L.hc_attn, fn);
    visit_hyper(L.hc_ffn, fn);
    const GdnWeights& g = L.gdn;
    for (const Weight* w : {&g.qkv, &g.gate, &g.beta, &g.alpha, &g.conv1d, &g.dt_bias, &g.a, &g.norm, &g.out}) fn(*w);
    const QsaWeights& q = L.qsa;
    for (const Weight* w : {&q.q, &q.k, &q.v, &q.out, &q.q_norm, &q.k_norm, &q.idx_q, &q.idx_k, &q.idx_q_norm,
                            &q.idx_k_norm})
        fn(*w);
    const MoeWeights& m = L.moe;
    for (const Weight* w : {&m.router, &m.gate_exps, &m.up_exps, &m.down_exps, &m.shexp_gate_inp, &m.gate_shexp,
                            &m.up_shexp, &m.down_shexp})
        fn(*w);
    if (L.has_ple) {
        const PleWeights& p = L.ple;     // the PLE table itself stays on the host (rows are read per token)
        for (const Weight* w : {&p.key, &p.value, &p.norm_key, &p.norm_query, &p.norm_conv, &p.conv1d}) fn(*w);
    }
}

// The small weights the ops read as f32 (norms, biases, conv taps): converted at load, not inside a captured pass.
template <class Fn>
void visit_f32(const LayerWeights& L, Fn&& fn) {
    for (const Weight* w : {&L.hc_attn.norm, &L.hc_ffn.norm, &L.gdn.conv1d, &L.gdn.dt_bias, &L.gdn.a, &L.gdn.norm,
                            &L.qsa.q_norm, &L.qsa.k_norm, &L.qsa.idx_q_norm, &L.qsa.idx_k_norm})
        fn(*w);
    if (L.has_ple)
        for (const Weight* w : {&L.ple.norm_key, &L.ple.norm_query, &L.ple.norm_conv, &L.ple.conv1d}) fn(*w);
}

template <class Fn>
void visit_nextn(const NextnWeights& n, Fn&& fn) {
    for (const Weight* w : {&n.eh_proj, &n.enorm, &n.hnorm}) fn(*w);
    visit_hyper(n.head, fn);
}
}  // namespace

void CudaBackend::prepare_weights(const ModelWeights& mw) {
    cuda::HybridMoe* hy = impl_->hybrid.get();
    if (hy) hy->register_layers(mw);
    auto up = [&](const Weight& w) {
        if (!hy || !hy->keeps_on_host(w)) upload_weight(w);
    };
    for (const LayerWeights& L : mw.layers)
        if (L.recurrent) upload_together({&L.gdn.qkv, &L.gdn.gate, &L.gdn.beta, &L.gdn.alpha});
    up(mw.token_embd);
    up(mw.output);
    visit_hyper(mw.output_hc, up);
    for (const LayerWeights& L : mw.layers) visit_layer(L, up);
    if (mw.has_nextn) visit_nextn(mw.nextn, up);
    auto f32 = [&](const Weight& w) {
        if (w.present() && w.data) impl_->dev_f32(w);
    };
    f32(mw.output_hc.norm);
    for (const LayerWeights& L : mw.layers) visit_f32(L, f32);
    if (hy) {
        std::vector<const float*> routers;   // the prefetch worker's view of each MoE layer's router (F32 [E, H])
        for (const LayerWeights& L : mw.layers) {
            const MoeWeights& m = L.moe;
            if (!m.gate_exps.present()) continue;
            const bool f32 = m.router.present() && m.router.data && m.router.type == GgmlType::F32 &&
                             m.router.ne[0] == m.gate_exps.ne[0] && m.router.n_rows() == m.gate_exps.ne[2];
            const uint8_t* d = f32 ? impl_->dev(m.router) : nullptr;   // (the worker reads rows as float4s)
            routers.push_back(d && reinterpret_cast<uintptr_t>(d) % 16 == 0 && m.router.ne[0] % 4 == 0
                                  ? reinterpret_cast<const float*>(d) : nullptr);
        }
        hy->set_routers(std::move(routers));
        hy->prepare();     // the cache takes what VRAM the weights above left
    }
}

void CudaBackend::prepare_weights_extra(const LayerWeights& block, const NextnWeights& nextn) {
    auto up = [&](const Weight& w) { upload_weight(w); };
    visit_layer(block, up);
    visit_nextn(nextn, up);
    auto f32 = [&](const Weight& w) {
        if (w.present() && w.data) impl_->dev_f32(w);
    };
    visit_f32(block, f32);
    for (const Weight* w : {&nextn.enorm, &nextn.hnorm, &nextn.head.norm}) f32(*w);
}

Backend::MemoryUse CudaBackend::memory_use() const {
    const cuda::DevicePool& p = impl_->pool;
    return {(int64_t)p.live_bytes(), (int64_t)p.peak_bytes(), (int64_t)p.held_bytes()};
}
void CudaBackend::reset_memory_peak() { impl_->pool.reset_peak(); }

// Inside a capture only ops allocate (Backend's default compositions): from the graph's own scratch.
float* CudaBackend::alloc(size_t n) { return static_cast<float*>(impl_->scratch->get(std::max<size_t>(n, 1) * sizeof(float))); }
void CudaBackend::release(float* p) {
    ++impl_->act_epoch;
    impl_->scratch->put(p);
}

void CudaBackend::to_device(float* dst, const float* host, size_t n) {
    Impl::OpScope prof_op(*impl_, "to_device");
    ++impl_->act_epoch;
    impl_->upload_is_to_device = true;
    impl_->upload(dst, host, n * sizeof(float));
    impl_->upload_is_to_device = false;
}

void CudaBackend::to_host(float* host, const float* src, size_t n) {
    if (!n) return;
    STRATA_CHECK(!impl_->capturing, "cuda: to_host inside a graph capture");
    impl_->prof->pass_host_done();
    CUDA_CHECK(cudaMemcpyAsync(host, src, n * sizeof(float), cudaMemcpyDeviceToHost, impl_->stream));
    CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
    impl_->prof->synced();
    if (impl_->hybrid && impl_->hybrid->trace()) impl_->hybrid->trace()->mark(cuda::HybridTrace::kMarkLogitsOnHost);
}

void CudaBackend::argmax_rows(const float* x, int rows, int n, int32_t* out) {
    Impl::OpScope prof_op(*impl_, "argmax_rows");
    cuda::argmax_rows(impl_->stream, x, rows, n, out, impl_->argmax_state);
    impl_->done("argmax_rows");
}

void CudaBackend::fill(float* x, float value, size_t n) {
    Impl::OpScope prof_op(*impl_, "fill");
    cuda::fill(impl_->stream, x, value, n);
    impl_->done("fill");
}

void CudaBackend::copy(float* dst, const float* src, size_t n) {
    Impl::OpScope prof_op(*impl_, "copy");
    if (!n || dst == src) return;
    const size_t bytes = n * sizeof(float);
    if (dst < src + n && src < dst + n) {     // overlapping (memmove): through scratch
        Impl::Buf tmp(*impl_, bytes);
        CUDA_CHECK(cudaMemcpyAsync(tmp.p, src, bytes, cudaMemcpyDeviceToDevice, impl_->stream));
        CUDA_CHECK(cudaMemcpyAsync(dst, tmp.p, bytes, cudaMemcpyDeviceToDevice, impl_->stream));
    } else {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, impl_->stream));
    }
    impl_->done("copy");
}

std::unique_ptr<Backend> make_cuda_backend(const GpuOptions& opt) {
    return std::make_unique<GraphBackend>(std::make_unique<CudaBackend>(0, opt));
}

}  // namespace strata
