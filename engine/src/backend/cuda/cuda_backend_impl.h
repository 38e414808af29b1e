// CudaBackend::Impl: the state the cuda_backend*.cu files share (stream, memory pools, uploaded weights, matmul-input
// caches, graph capture) and its helpers (upload, done, quantized, gate_up, matmul_rows).
// Private: included only by engine/src/backend/cuda/cuda_backend*.cu.
#pragma once
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/captured_graph.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_pool.h"
#include "backend/cuda/gpu_op_profile.h"
#include "backend/cuda/hybrid_moe.h"
#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/kernels/matmul_tiled.h"
#include "backend/cuda/kernels/moe_gate_up.h"
#include "backend/cuda/pinned_staging.h"
#include "common/env.h"
#include "common/error.h"

namespace strata {

// moe_gate_up launches, all backends (CudaBackend::fused_gate_ups); inline: one counter for all cuda_backend*.cu files.
inline std::atomic<int64_t> fused_gate_up_count{0};

struct CudaBackend::Impl {
    int device = 0;
    cudaStream_t stream = nullptr;
    void* argmax_state = nullptr;   // cuda::argmax_rows's meeting place for a long row's blocks (this stream's)
    cuda::DevicePool pool;
    struct Upload {
        size_t bytes;
        uint8_t* dev;
        bool owner = true;     // false: a part of another upload's allocation (upload_together)
    };
    std::map<const uint8_t*, Upload> weights;                // host data start → device copy (stored format)
    std::unordered_map<const uint8_t*, float*> f32;          // host data → f32 copy (vectors the ops read as f32)
    size_t weight_bytes = 0;
    bool sync_each_op = false;
    bool f32_act = false;
    std::unique_ptr<cuda::HybridMoe> hybrid;     // expert cache + CPU misses; null when every expert is uploaded
    // Scratch inside ops (Buf, cached quantizations): the pool, or while capturing the graph's own pool.
    cuda::DevicePool* scratch = &pool;
    cuda::PinnedStaging staging{4 << 20};        // uploads of directly issued ops
    cuda::PinnedBuffer route_host;               // routing copied back for the hybrid path

    bool graphs_on = false;                      // GraphCapture offered (not with the profile or STRATA_CUDA_SYNC)
    cuda::CapturedGraph* capturing = nullptr;    // the graph being captured
    bool upload_is_to_device = false;            // the upload in progress comes from to_device (a refillable slot)
    std::unique_ptr<cuda::GpuOpProfile> prof;    // STRATA_CUDA_PROFILE=1; created with the stream

    // The profile's span of one Backend op (or of a step inside a fused op): open for the scope.
    struct OpScope {
        cuda::GpuOpProfile& p;
        OpScope(Impl& im, const char* op, const char* detail = nullptr) : p(*im.prof) {
            if (p.on()) p.open(op, detail);
        }
        ~OpScope() {
            if (p.on()) p.close();
        }
        OpScope(const OpScope&) = delete;
        OpScope& operator=(const OpScope&) = delete;
    };

    // Backend::gdn_block in two kernels between its matmuls (kernels/gdn_fused.cu); STRATA_CUDA_FUSED_GDN=0 turns it off.
    // gdn_quant: its recurrence kernel also quantizes o for the out projection where the block fits (same bits as
    // quantize_act); STRATA_CUDA_GDN_QUANT=0 turns that off.
    bool fused_gdn = true, gdn_quant = true;

    // Decode-sized MoE in fewer launches (gate+up+swiglu as one kernel, the shared expert's tail as one);
    // STRATA_CUDA_FUSED_MOE=0 turns it off.
    bool fused_moe = true;
    int32_t* zero_ids = nullptr;                 // kTiledMinRows zeros: the shared expert as "expert 0"

    uint64_t ops = 0;                            // Backend ops done, for moe_input's validity

    // The device address of a weight's data (also for views inside an uploaded tensor).
    const uint8_t* dev(const Weight& w) const {
        STRATA_CHECK(w.data, "cuda: weight ", w.tensor ? w.tensor->name : "(unnamed)", " has no data");
        auto it = weights.upper_bound(w.data);
        if (it != weights.begin()) {
            --it;
            if (w.data < it->first + it->second.bytes) return it->second.dev + (w.data - it->first);
        }
        fail("cuda: weight ", w.tensor ? w.tensor->name : "(unnamed)", " is not on the device (prepare_weights not called?)");
    }

    // A 2-D weight on the device as a matmul operand (rows of ne[0] values in its block format).
    cuda::MatmulArgs dense_args(const Weight& w) const {
        cuda::MatmulArgs m;
        m.type = w.type;
        m.w = dev(w);
        m.row_bytes = w.row_bytes;
        m.rows = w.n_rows();
        m.n = (int)w.ne[0];
        return m;
    }

    const float* dev_f32(const Weight& w) {
        auto it = f32.find(w.data);
        if (it != f32.end()) return it->second;
        STRATA_CHECK(!capturing, "cuda: weight ", w.tensor ? w.tensor->name : "(unnamed)",
                     " needed as f32 inside a graph capture (prepare_weights converts the small weights)");
        const std::vector<float> host = weight_to_f32(w);
        float* d = nullptr;
        CUDA_CHECK(cudaMalloc(&d, host.size() * sizeof(float)));
        CUDA_CHECK(cudaMemcpy(d, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
        f32[w.data] = d;
        weight_bytes += host.size() * sizeof(float);
        return d;
    }

    // Scratch device memory for the duration of one op (stream order makes the early return to the pool safe).
    struct Buf {
        Impl& im;
        void* p;
        Buf(Impl& i, size_t bytes) : im(i), p(i.scratch->get(bytes)) {}
        ~Buf() { im.scratch->put(p); }
        Buf(const Buf&) = delete;
        Buf& operator=(const Buf&) = delete;
        template <class T> T* as() const { return static_cast<T*>(p); }
    };

    // Host → device without waiting: through pinned staging (the host array may be pageable and short-lived).
    // While capturing, the data goes to a slot of the graph (refilled by later launches when it came from to_device).
    void upload(void* dst, const void* host, size_t bytes) {
        if (!bytes) return;
        if (capturing) {
            if (!upload_is_to_device) capturing->mark_unrepeatable();
            void* slot = capturing->take_slot(bytes);
            std::memcpy(slot, host, bytes);
            CUDA_CHECK(cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyHostToDevice, stream));
            return;
        }
        void* staged = staging.take(bytes);
        if (!staged && bytes <= staging.half_bytes()) {
            staging.record(stream);
            staging.flip_and_wait();
            staged = staging.take(bytes);
        }
        if (!staged) {
            // Too large for staging (a state restore): a plain copy and a wait.
            CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream));
            CUDA_CHECK(cudaStreamSynchronize(stream));
            return;
        }
        std::memcpy(staged, host, bytes);
        CUDA_CHECK(cudaMemcpyAsync(dst, staged, bytes, cudaMemcpyHostToDevice, stream));
    }

    // The matmul-input caches hold scratch; a capture starts and ends without them (its scratch is its own).
    void drop_op_caches() {
        drop_act_cache();
        drop_moe_input();
        if (early_shexp.sh) scratch->put(early_shexp.sh);
        early_shexp = EarlyShexp{};
    }

    // keeps_act: the op wrote only memory outside the cached matmul input (see act_cache).
    // The fused hyper read's arguments for w (cuda_backend_dense.cu); false when the shapes do not match.
    bool hyper_read_args(const HyperWeights& w, int n, int H, float eps, bool with_inj, cuda::HyperReadArgs& a);

    void done(const char* op, bool keeps_act = false) {
        ++ops;
        if (!keeps_act) ++act_epoch;
        if (!sync_each_op) return;
        const cudaError_t err = cudaStreamSynchronize(stream);
        if (err != cudaSuccess) fail("CUDA error after op ", op, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
    }

    // The quantized form of the last matmul input, reused by the next matmuls of the same x (GDN's projections, the
    // router and shared expert, ...) while no other op has run: every op but matmul moves act_epoch, and a matmul
    // whose output overlaps x drops it.
    struct ActCache {
        const float* x = nullptr;
        int rows = 0, n = 0, blk = 0;
        uint64_t epoch = 0;
        void* q = nullptr;
        void* d = nullptr;
    } act_cache;
    uint64_t act_epoch = 1;

    void drop_act_cache() {
        scratch->put(act_cache.q);
        scratch->put(act_cache.d);
        act_cache = ActCache{};
    }

    // moe_experts' quantized input, kept for the shared_expert op that follows it directly with the same x (the
    // down projection in between replaces act_cache). Valid while ops == after_ops.
    struct MoeInput {
        ActCache act;
        uint64_t after_ops = 0;
    } moe_input;

    // The shared expert's output computed before the hybrid join (shared_expert with y null), for the
    // shared_expert call that follows with the same weights, input and T.
    struct EarlyShexp {
        const MoeWeights* w = nullptr;
        const float* u = nullptr;
        int T = 0;
        void* sh = nullptr;
    } early_shexp;

    // A device-driven hybrid MoE call whose CPU share is still to be added into y: the shared_expert call that
    // follows adds it after its own work (the GPU computes the shared expert while the CPU computes its pairs).
    struct PendingJoin {
        float* y = nullptr;
        int T = 0;
    } pending_join;

    void drop_moe_input() {
        scratch->put(moe_input.act.q);
        scratch->put(moe_input.act.d);
        moe_input = MoeInput{};
    }

    // STRATA_CUDA_MOE_FQ=0: the decode MoE kernels' input quantized by a quantize_act launch first (an A/B of
    // moe_act below); read when the backend is made.
    const bool moe_fq = env_switch("STRATA_CUDA_MOE_FQ", true);

    // The input of the decode MoE kernels (cuda::moe_decode / moe_shexp_decode): null, so that the gate/up kernel's
    // blocks quantize their row of x themselves (the same bits, one launch fewer), unless x's quantization is
    // already cached; else quantized(x).
    cuda::ActQ8 moe_act(const float* x, int rows, int n, int blk) {
        const ActCache& c = act_cache;
        const bool cached = c.q && c.epoch == act_epoch && c.x == x && c.rows == rows && c.n == n && c.blk == blk;
        const size_t smem = (size_t)n + (size_t)(n / blk) * 8;   // the int8 values, scales and Σs (moe_decode)
        if (moe_fq && !cached && n % blk == 0 && smem <= 40 * 1024) return cuda::ActQ8{};
        return quantized(x, rows, n, blk);
    }

    // x [rows, n] quantized in blocks of blk (blk > 0), through act_cache as matmul_rows does; also takes
    // moe_input's copy when it is still valid.
    cuda::ActQ8 quantized(const float* x, int rows, int n, int blk) {
        ActCache& c = act_cache;
        auto same = [&](const ActCache& a) { return a.q && a.x == x && a.rows == rows && a.n == n && a.blk == blk; };
        if (same(c) && c.epoch == act_epoch) return cuda::ActQ8{static_cast<int8_t*>(c.q), static_cast<float*>(c.d)};
        if (same(moe_input.act) && moe_input.after_ops == ops) {
            drop_act_cache();
            c = moe_input.act;
            c.epoch = act_epoch;
            moe_input = MoeInput{};
            return cuda::ActQ8{static_cast<int8_t*>(c.q), static_cast<float*>(c.d)};
        }
        STRATA_CHECK(n % blk == 0, "cuda matmul: ", n, " inputs are not a multiple of the activation block ", blk);
        drop_act_cache();
        void* q = scratch->get((size_t)rows * n);
        void* d = scratch->get((size_t)rows * (n / blk) * sizeof(float));
        c = ActCache{x, rows, n, blk, act_epoch, q, d};
        cuda::quantize_act(stream, blk, x, rows, n, cuda::ActQ8{static_cast<int8_t*>(q), static_cast<float*>(d)});
        return cuda::ActQ8{static_cast<int8_t*>(q), static_cast<float*>(d)};
    }

    // h[p] = silu(gate_p · x[p / act_div]) ⊙ (up_p · x[p / act_div]): one kernel (moe_gate_up) when fused_moe and
    // the format allows, else two matmuls and swiglu. gate, up without ids: one matrix each (P == act_rows).
    void gate_up(cuda::MatmulArgs g, cuda::MatmulArgs u, const float* x, int act_rows, int P, float* h) {
        const int blk = cuda::act_block(g.type);
        if (fused_moe && !f32_act && blk && g.type == u.type && act_rows < cuda::kTiledMinRows) {
            if (!g.ids) {
                g.ids = u.ids = zero_ids;     // P == act_rows < kTiledMinRows zeros
                g.mat_stride = u.mat_stride = 0;
            }
            if (cuda::moe_gate_up(stream, g, u, quantized(x, act_rows, g.n, blk), P, h)) {
                ++fused_gate_up_count;
                wrote(h, (size_t)P * g.rows * sizeof(float));
                return;
            }
            if (g.ids == zero_ids) g.ids = u.ids = nullptr;
        }
        Buf up(*this, (size_t)P * u.rows * sizeof(float));
        matmul_rows(g, x, act_rows, P, h);
        matmul_rows(u, x, act_rows, P, up.as<float>());
        cuda::swiglu(stream, h, up.as<float>(), (size_t)P * g.rows, h);
    }

    // Marks the cached input stale when [y, y + n) overlaps it.
    void wrote(const void* y, size_t bytes) {
        const ActCache& c = act_cache;
        if (!c.q) return;
        const uint8_t* a = static_cast<const uint8_t*>(y);
        const uint8_t* x = reinterpret_cast<const uint8_t*>(c.x);
        if (a < x + (size_t)c.rows * c.n * sizeof(float) && x < a + bytes) ++act_epoch;
    }

    // STRATA_CUDA_FUSED_QUANT=1 turns on the fused quantization below (read when the backend is made). Off by default:
    // on the H200 the synthetic full-size model decoded 87.5 tok/s without it and 77.5 with it (same tokens); each
    // block re-quantizing the whole row costs more than the launch it saves on small matrices.
    const bool fused_quant = env_switch("STRATA_CUDA_FUSED_QUANT", false);

    // y[p] = W_p · x[p / act_div] for P activation rows; quantizes x first for block formats as the CPU path does.
    // order: the pairs sorted by expert (prompt-sized moe_experts), run by the tiled kernels. Decode-sized calls
    // (P ≤ 8 rows, or expert pairs of ≤ 8 tokens) quantize inside the matmul kernel (cuda::matmul_fused_quant) and
    // skip the quantize launch, unless x's quantization is already cached from an unfused call.
    void matmul_rows(const cuda::MatmulArgs& m, const float* x, int act_rows, int P, float* y,
                     const cuda::ExpertOrder* order = nullptr) {
        const int blk = cuda::act_block(m.type);
        auto run = [&](cuda::ActQ8 act) {
            if (order) cuda::matmul_tiled_experts(stream, m, *order, x, act, P, y);
            else cuda::matmul(stream, m, x, act, P, y);
        };
        if (!blk || f32_act) {
            run(cuda::ActQ8{});
            wrote(y, (size_t)P * m.rows * sizeof(float));
            return;
        }
        STRATA_CHECK(m.n % blk == 0, "cuda matmul: ", m.n, " inputs are not a multiple of the activation block ", blk,
                     " of ", ggml_type_name(m.type));
        ActCache& c = act_cache;
        const bool cached = c.q && c.epoch == act_epoch && c.x == x && c.rows == act_rows && c.n == m.n && c.blk == blk;
        if (!cached && !order && fused_quant && cuda::matmul_fused_quant(stream, m, x, P, y)) {
            wrote(y, (size_t)P * m.rows * sizeof(float));
            return;
        }
        if (!cached) {
            drop_act_cache();
            void* q = scratch->get((size_t)act_rows * m.n);
            void* d = scratch->get((size_t)act_rows * (m.n / blk) * sizeof(float));
            c = ActCache{x, act_rows, m.n, blk, act_epoch, q, d};
            cuda::quantize_act(stream, blk, x, act_rows, m.n, cuda::ActQ8{static_cast<int8_t*>(q), static_cast<float*>(d)});
        }
        run(cuda::ActQ8{static_cast<int8_t*>(c.q), static_cast<float*>(c.d)});
        wrote(y, (size_t)P * m.rows * sizeof(float));
    }
};

}  // namespace strata
