// HybridMoe's device-driven join (hybrid_device.h): its mapped memory, the plan and join launches, the pass-boundary
// bookkeeping and the dispatcher's side of a device job. The dispatcher loop itself is in hybrid_join.cu.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/hybrid_moe.h"
#include "common/error.h"
#include "common/log.h"

namespace strata::cuda {

namespace {
int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}
constexpr int64_t kArmNs = 50'000'000;   // the dispatcher polls for 50 ms after a pass boundary or its last job

template <class T> T* mapped_device(T* host) {
    void* d = nullptr;
    CUDA_CHECK(cudaHostGetDevicePointer(&d, host, 0));
    return static_cast<T*>(d);
}
}  // namespace

void HybridMoe::prepare_device_path() {
    // STRATA_HYBRID_DEVICE=0: the host-driven join (A/B runs; tests/gpu/device_join_parity.py checks one against the other).
    const char* env = std::getenv("STRATA_HYBRID_DEVICE");
    if (!cache_ || !cpu_thread_.joinable() || (env && std::strcmp(env, "0") == 0)) return;
    const int L_n = (int)layers_.size();
    const int H = (int)layers_[0].gate.ne[0];
    for (const Layer& L : layers_) {   // the decode kernels must take every layer's experts through tables
        static const uint8_t* const dummy[1] = {nullptr};
        auto args = [&](const Weight& e, int rows, int n) {
            MatmulArgs m;
            m.type = e.type;
            m.row_bytes = e.row_bytes;
            m.rows = rows;
            m.n = n;
            m.mats = dummy;
            return m;
        };
        const int I = (int)L.gate.ne[1];
        if (!moe_decode_supported(args(L.gate, I, H), args(L.up, I, H), args(L.down, H, I), 1)) {
            log_info("experts", fmt("decode MoE joins on the host: the decode kernels do not take ",
                                    ggml_type_name(L.gate.type), " / ", ggml_type_name(L.down.type), " experts"));
            return;
        }
    }
    slot_bytes_ = job_slot_bytes(H);
    void* p = nullptr;
    CUDA_CHECK(cudaHostAlloc(&p, slot_bytes_ * kRingSlots, cudaHostAllocMapped));
    std::memset(p, 0, slot_bytes_ * kRingSlots);
    ring_ = static_cast<uint8_t*>(p);
    ring_dev_ = mapped_device(ring_);
    CUDA_CHECK(cudaHostAlloc(&p, 4096, cudaHostAllocMapped));
    std::memset(p, 0, 4096);
    words_ = static_cast<DeviceJoinWords*>(p);
    words_dev_ = mapped_device(words_);
    const size_t map_bytes = (size_t)L_n * n_experts_ * sizeof(int32_t);
    CUDA_CHECK(cudaHostAlloc(&p, map_bytes, cudaHostAllocDefault));
    slot_map_ = static_cast<int32_t*>(p);
    CUDA_CHECK(cudaMalloc(&slot_map_gpu_, map_bytes));
    for (int l = 0; l < L_n; ++l)
        for (int e = 0; e < n_experts_; ++e) mirror_slot(l, e);
    upload_slot_map();
    CUDA_CHECK(cudaMalloc(&state_, sizeof(DeviceJoinState)));
    CUDA_CHECK(cudaMemset(state_, 0, sizeof(DeviceJoinState)));
    // Zero-copy reads of missed experts need the pinned host tensors mapped into the device's address space.
    int zc_layers = 0;
    zero_copy_.assign(L_n, {nullptr, nullptr, nullptr});
    for (int l = 0; l < L_n && (gpu_miss_share_ > 0 || share_auto_); ++l) {
        std::array<const uint8_t*, 3> d{};
        bool ok = true;
        const Weight* t[3] = {&layers_[l].gate, &layers_[l].up, &layers_[l].down};
        for (int m = 0; m < 3 && ok; ++m) {
            void* dp = nullptr;
            ok = cudaHostGetDevicePointer(&dp, const_cast<uint8_t*>(t[m]->data), 0) == cudaSuccess;
            d[m] = static_cast<const uint8_t*>(dp);
        }
        if (!ok) {
            cudaGetLastError();
            continue;
        }
        zero_copy_[l] = d;
        ++zc_layers;
    }
    zero_copy_any_ = zc_layers > 0;
    // Staging slots for the zero-copy experts of a call (hybrid_device.h); STRATA_HYBRID_STAGE=0: the decode kernels
    // read host memory themselves (A/B runs). Without the VRAM for them, likewise.
    const char* stage_env = std::getenv("STRATA_HYBRID_STAGE");
    if (zero_copy_any_ && !(stage_env && std::strcmp(stage_env, "0") == 0)) {
        size_t* most = stage_stride_;   // the largest matrix of each kind; every one whole 16-byte words (the copy)
        bool ok = true;
        for (const Layer& L : layers_) {
            const size_t bytes[3] = {L.gate_bytes, L.up_bytes, L.down_bytes};
            for (int m = 0; m < 3; ++m) {
                most[m] = std::max(most[m], bytes[m]);
                ok = ok && bytes[m] % 16 == 0;
            }
        }
        for (int m = 0; m < 3 && ok; ++m) {
            void* d = nullptr;
            ok = cudaMalloc(&d, most[m] * kStageExperts) == cudaSuccess;
            zc_stage_[m] = static_cast<uint8_t*>(d);
        }
        if (!ok) {
            cudaGetLastError();
            for (uint8_t*& d : zc_stage_) {
                if (d) cudaFree(d);
                d = nullptr;
            }
            log_info("experts", "zero-copy experts are read in place (no staging slots: no VRAM, or odd sizes)");
        }
    }
    if (share_auto_ && zero_copy_any_) {
        if (share_balance_on_) pcie_rate_ = measure_pcie_rate();
        gpu_miss_share_ = share_balance_on_ ? share_bal_.share : share_ctl_.next();
    }
    push_share();
    const char* share_log = std::getenv("STRATA_SHARE_LOG");
    share_log_ = share_auto_ && zero_copy_any_ && share_log && std::strcmp(share_log, "1") == 0;
    share_log_wait_ns_ = words_->wait_ns;
    const char* trace_env = std::getenv("STRATA_HYBRID_TRACE");
    if (trace_env && std::strcmp(trace_env, "1") == 0) {
        trace_ = std::make_unique<HybridTrace>(L_n, stream_);
        unsigned long long* table = trace_->device_table();
        CUDA_CHECK(cudaMemcpyAsync(&state_->trace, &table, sizeof(table), cudaMemcpyHostToDevice, stream_));
        CUDA_CHECK(cudaStreamSynchronize(stream_));   // `table` is a local
    }
    prepare_prefetch();
    device_on_.store(true, std::memory_order_release);
    log_info("experts", fmt("decode MoE joins on the device (one graph per pass); ",
                            share_auto_ && zero_copy_any_
                                ? fmt("a share of the missed experts read zero-copy over PCIe in ", zc_layers, " of ",
                                      L_n, " layers", zc_stage_[0] ? " (copied into staging slots first)" : "",
                                      ", tuned while decoding from ", auto_share(),
                                      share_balance_on_ ? fmt(" by the joins that wait for the CPU (PCIe reads ",
                                                              (int)(pcie_rate_ / 1e8) / 10.0, " GB/s)")
                                                        : std::string(" by probing the pass time"))
                            : gpu_miss_share_ > 0 && zero_copy_any_
                                ? fmt("a share of ", gpu_miss_share_, " of the missed experts read zero-copy over PCIe in ",
                                      zc_layers, " of ", L_n, " layers",
                                      zc_stage_[0] ? " (copied into staging slots first)" : "")
                                : std::string("all missed experts on the CPU")));
}

// The zero-copy rate MissShareBalance weighs the CPU pool's against: the first layer's gate experts copied from
// pinned host memory into the gate staging slots (or, without them, a scratch buffer), the best of three timed
// copies. The stage kernel reads at about this rate; the decode kernels reading experts in place
// (STRATA_HYBRID_STAGE=0) are slower. 0 when no device memory is left for it (the controller then aims at 1/2).
double HybridMoe::measure_pcie_rate() {
    const Layer& L = layers_[0];
    size_t bytes = std::min<size_t>(L.gate_bytes * (size_t)n_experts_, L.gate_bytes * (size_t)kStageExperts);
    void* d = zc_stage_[0];
    void* own = nullptr;
    if (!d) {
        if (cudaMalloc(&own, bytes) != cudaSuccess) {
            cudaGetLastError();
            return 0.0;
        }
        d = own;
    }
    cudaEvent_t t0, t1;
    CUDA_CHECK(cudaEventCreate(&t0));
    CUDA_CHECK(cudaEventCreate(&t1));
    float best_ms = 0;
    for (int i = 0; i < 3; ++i) {
        CUDA_CHECK(cudaEventRecord(t0, stream_));
        CUDA_CHECK(cudaMemcpyAsync(d, L.gate.data, bytes, cudaMemcpyHostToDevice, stream_));
        CUDA_CHECK(cudaEventRecord(t1, stream_));
        CUDA_CHECK(cudaEventSynchronize(t1));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
        if (i == 0 || ms < best_ms) best_ms = ms;
    }
    CUDA_CHECK(cudaEventDestroy(t0));
    CUDA_CHECK(cudaEventDestroy(t1));
    if (own) CUDA_CHECK(cudaFree(own));
    return best_ms > 0 ? (double)bytes / (best_ms * 1e-3) : 0.0;
}

// After a counted pass: the controller in use sets the share the next pass runs at.
void HybridMoe::tune_share(double pass_ns) {
    if (!share_balance_on_) {
        share_ctl_.update(pass_ns);
        gpu_miss_share_ = share_ctl_.next();
        return;
    }
    const uint32_t jobs = miss_jobs_.load(std::memory_order_relaxed), late = words_->late_joins;
    const double cpu_s = cpu_->seconds();
    const int64_t cpu_bytes = counters_.cpu_bytes;
    if (cpu_s > ctl_cpu_s_ && cpu_bytes > ctl_cpu_bytes_) {   // the pool's rate, averaged over the recent passes
        const double r = (double)(cpu_bytes - ctl_cpu_bytes_) / (cpu_s - ctl_cpu_s_);
        cpu_rate_ = cpu_rate_ > 0 ? 0.9 * cpu_rate_ + 0.1 * r : r;
    }
    const int miss_layers = (int)(jobs - ctl_miss_jobs_), late_layers = (int)(late - ctl_late_);
    share_bal_.update(miss_layers, late_layers, cpu_rate_, pcie_rate_);
    if (share_log_ && miss_layers > 0) {
        share_log_late_ += (double)late_layers / miss_layers;
        share_log_target_ += MissShareBalance::target(cpu_rate_, pcie_rate_);
    }
    ctl_miss_jobs_ = jobs;
    ctl_late_ = late;
    ctl_cpu_bytes_ = cpu_bytes;
    ctl_cpu_s_ = cpu_s;
    gpu_miss_share_ = share_bal_.share;
}

void HybridMoe::log_share_pass(double pass_ns) {
    share_log_pass_ns_ += pass_ns;
    share_log_share_ += gpu_miss_share_;   // the share this pass ran at
    if (++share_log_n_ < kShareLogPasses) return;
    const unsigned long long wait = words_->wait_ns;
    const std::string how =
        share_balance_on_
            ? fmt("balance: CPU last in ", share_log_late_ / share_log_n_, " of the layers with misses (target ",
                  share_log_target_ / share_log_n_, "; CPU ", (int)(cpu_rate_ / 1e8) / 10.0, " GB/s, PCIe ",
                  (int)(pcie_rate_ / 1e8) / 10.0, " GB/s)")
            : fmt("climb: centre ", share_ctl_.share);
    log_info("experts", fmt("auto share ", how, ", mean share run ", share_log_share_ / share_log_n_, " over ",
                            share_log_n_, " passes of ", share_log_pass_ns_ / share_log_n_ / 1e6, " ms; GPU waited ",
                            (double)(wait - share_log_wait_ns_) / share_log_n_ / 1e6, " ms a pass for the CPU"));
    share_log_wait_ns_ = wait;
    share_log_n_ = 0;
    share_log_pass_ns_ = share_log_share_ = share_log_late_ = share_log_target_ = 0;
}

// The plan kernels read the share from device memory: copied there stream-ordered (the words page is pinned; the
// host writes share_next again only after the next boundary's synchronisation).
void HybridMoe::push_share() {
    words_->share_next = (float)(zero_copy_any_ ? gpu_miss_share_ : 0.0);
    CUDA_CHECK(cudaMemcpyAsync(&state_->share, &words_->share_next, sizeof(float), cudaMemcpyHostToDevice, stream_));
}

void HybridMoe::mirror_slot(int layer, int expert) {
    if (!slot_map_) return;
    slot_map_[(size_t)layer * n_experts_ + expert] = cache_->slot_of(layer, expert);
    slot_map_dirty_ = true;
}

// Stream-ordered before the plan kernels issued after it. A copy that runs late may read entries the host changed
// after issuing it: only later states (an eviction, or a landed move whose data is in its slot), both safe to see.
void HybridMoe::upload_slot_map() {
    if (!slot_map_dirty_) return;
    CUDA_CHECK(cudaMemcpyAsync(slot_map_gpu_, slot_map_, (size_t)layers_.size() * n_experts_ * sizeof(int32_t),
                               cudaMemcpyHostToDevice, stream_));
    slot_map_dirty_ = false;
}

bool HybridMoe::device_path(int T, int k) const {
    return device_on_ && T > 0 && T <= kDeviceTokens && T * k <= kDevicePairs && T < opt_.gpu_miss_min_tokens;
}

std::array<const uint8_t* const*, 3> HybridMoe::plan_device(const MoeWeights& w, const float* x, int T, int k,
                                                             const int32_t* d_ids, const float* d_w) {
    const int l = layer_of(w);
    STRATA_ASSERT(l >= 0 && device_path(T, k));
    const Layer& L = layers_[l];
    PlanArgs a{};
    a.ids = d_ids;
    a.weights = d_w;
    a.x = x;
    a.T = T;
    a.k = k;
    a.H = (int)L.gate.ne[0];
    a.layer = l;
    a.slot_map = slot_map_gpu_ + (size_t)l * n_experts_;
    const uint8_t* arena[3] = {L.d_gate, L.d_up, L.d_down};
    const size_t bytes[3] = {L.gate_bytes, L.up_bytes, L.down_bytes};
    for (int m = 0; m < 3; ++m) {
        a.arena[m] = arena[m];
        a.arena_stride[m] = bytes[m];
        a.host[m] = zero_copy_[l][m];
        a.host_stride[m] = bytes[m];
    }
    const bool staged = zc_stage_[0] && zero_copy_[l][0];
    for (int m = 0; m < 3; ++m) a.stage[m] = staged ? zc_stage_[m] : nullptr;
    a.ring = ring_dev_;
    a.slot_bytes = slot_bytes_;
    a.words = words_dev_;
    a.state = state_;
    if (prefetch_on_) {
        a.pf = pf_board_;
        a.pf_x = pf_x_;
        for (int m = 0; m < 3; ++m) {
            a.pf_area[m] = pf_area_[m];
            a.pf_stride[m] = stage_stride_[m];
        }
    }
    hybrid_plan(stream_, a);
    if (staged)
        hybrid_stage(stream_, state_, L.gate_bytes, L.up_bytes, L.down_bytes, prefetch_on_ ? pf_board_ : nullptr);
    return {state_->tables[0], state_->tables[1], state_->tables[2]};
}

void HybridMoe::join_device(float* y, int T) {
    hybrid_join(stream_, state_, ring_dev_, slot_bytes_, words_dev_, T, (int)layers_[0].gate.ne[0], y);
}

void HybridMoe::drain_device_jobs() {
    if (!device_on_) return;
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t spin = 0;; ++spin) {
        const uint32_t published = __atomic_load_n(&words_->published, __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&words_->consumed, __ATOMIC_ACQUIRE) == published) break;
        if (spin > 64) std::this_thread::yield();
        if ((spin & 1023) == 0 && std::chrono::steady_clock::now() - t0 > std::chrono::seconds(60))
            fail("experts: the CPU dispatcher did not take the device's MoE jobs for 60 s");
    }
    STRATA_CHECK(words_->timed_out == 0, "experts: the GPU gave up waiting for the CPU pool's results");
    std::lock_guard<std::mutex> lk(mu_);
    if (job_error_) {
        std::exception_ptr e = job_error_;
        job_error_ = nullptr;
        std::rethrow_exception(e);
    }
}

void HybridMoe::between_passes() {
    if (!device_on_) return;
    if (trace_) trace_->mark(HybridTrace::kMarkBoundaryStart);
    armed_until_ns_.store(now_ns() + kArmNs, std::memory_order_relaxed);
    cv_.notify_all();
    // No plan kernel of an earlier pass may still run (normally the caller has read that pass's results already, so
    // this returns at once): then every job is posted, the drain takes them all, and the slot map may change.
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    drain_device_jobs();
    if (trace_) trace_->end_pass(stream_);
    const int64_t boundary_start = now_ns();   // (the trace's own work not counted)
    if (share_auto_ && zero_copy_any_) {   // the last pass's time tunes the share (experts/miss_share.h)
        const int64_t now = now_ns();
        const uint32_t consumed = words_->consumed;
        if (consumed != ctl_consumed_ && ctl_last_ns_ > 0) {   // a pass of prompt chunks only is not counted
            tune_share((double)(now - ctl_last_ns_));
            if (share_log_) log_share_pass((double)(now - ctl_last_ns_));
            push_share();
        }
        ctl_last_ns_ = now;
        ctl_consumed_ = consumed;
    }
    land_moves();
    copy_planned_moves();   // moves planned at the last boundary whose pass was not a graph launch
    bool planned = false;
    for (int l = 0; l < (int)layers_.size(); ++l) planned = plan_layer_moves(l) || planned;
    if (planned) copy_after_compute();   // (the stream is idle here: the copies may start at once)
    upload_slot_map();   // the evictions and landings of this boundary, and of host-path calls since the last one
    launch_prefetch();   // (its worker reads the slot map: a stale entry only changes what it copies)
    if (trace_) {
        trace_->add_boundary_ns((double)(now_ns() - boundary_start));
        trace_->mark(HybridTrace::kMarkBoundaryEnd);
    }
}

// The copies of the moves planned at the boundary are queued once the pass is on its way (CudaBackend calls this
// right after a graph launch): ~600 copy calls when every layer adapts at once cost the host ~1-2 ms, which at the
// boundary would leave the GPU idle. They wait only for the passes before the boundary (copy_after_compute there):
// the pass running now already treats the evicted experts as misses (the slot map uploaded at the boundary).
void HybridMoe::after_pass_issued() { copy_planned_moves(); }

// A posted job of the ring: the cache records its routing; the CPU's pairs are computed, summed with their routing
// weights per token in pair order, and published through the done word.
bool HybridMoe::run_device_job() {
    uint8_t* slot = ring_ + (size_t)((dev_taken_ + 1) % kRingSlots) * slot_bytes_;
    const DeviceJob& job = *reinterpret_cast<const DeviceJob*>(slot);
    const uint32_t seq = dev_taken_ + 1;
    if (__atomic_load_n(&job.seq, __ATOMIC_ACQUIRE) != seq) return false;
    const int l = job.layer, T = job.T, k = job.k, P = T * k;
    const Layer& L = layers_[l];
    const int H = (int)L.gate.ne[0];
    if (trace_) trace_->host_stamp(l, kTrSeen);
    try {
        if (profile_out_) profile_out_->add(l, job.ids, P);
        for (int p = 0; p < P; ++p)
            if (job.place[p] != kPairCached) {   // MissShareBalance counts the layers with misses
                miss_jobs_.fetch_add(1, std::memory_order_relaxed);
                break;
            }
        cache_->record(l, job.ids, P);
        ++passes_;
        ++counters_.passes;
        if (job.n_cpu > 0) {
            collect_cpu_share(job, H, dev_share_);
            if (trace_) trace_->host_stamp(l, kTrComputeStart);
            cpu_->compute(L.gate, L.up, L.down, job_x(slot), dev_share_.pairs, dev_share_.rows.data());
            if (trace_) trace_->host_stamp(l, kTrComputeEnd);
            sum_cpu_share(job, dev_share_, H, job_out(slot, H));
            counters_.cpu_pairs += (int64_t)dev_share_.pairs.size();
            counters_.cpu_bytes += (int64_t)dev_share_.distinct * (int64_t)(L.gate_bytes + L.up_bytes + L.down_bytes);
        }
    } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        if (!job_error_) job_error_ = std::current_exception();
    }
    // Always published: the GPU waits for it (after an error the results are garbage and the host throws).
    if (job.n_cpu > 0) __atomic_store_n(&words_->done, seq, __ATOMIC_RELEASE);
    if (trace_ && job.n_cpu > 0) trace_->host_stamp(l, kTrDone);
    dev_taken_ = seq;
    __atomic_store_n(&words_->consumed, seq, __ATOMIC_RELEASE);
    armed_until_ns_.store(now_ns() + kArmNs, std::memory_order_relaxed);
    return true;
}

}  // namespace strata::cuda
