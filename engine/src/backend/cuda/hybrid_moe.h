// The hybrid MoE path of the CUDA backend: routed experts stay in host memory (pinned copies, one piece per layer,
// or the mapped file); an ExpertCache decides which sit in per-layer slot arenas on the GPU. moe_experts computes
// the cached pairs on the GPU while the CPU pool computes the misses, then sums both in slot order on the GPU
// (hybrid_join.cu: the CPU dispatcher and the mapped-flag wait where the two meet without blocking the host).
#pragma once
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/device_pool.h"
#include "backend/cuda/hybrid_device.h"
#include "backend/cuda/hybrid_trace.h"
#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/kernels/matmul_tiled.h"
#include "experts/cpu_expert_pool.h"
#include "experts/expert_cache.h"
#include "experts/gpu_options.h"
#include "experts/miss_share.h"
#include "experts/routing_profile.h"
#include "experts/staged_misses.h"
#include "model/weights.h"

namespace strata::cuda {

// y[p] = W_p · x[p / act_div] for P rows (the backend's matmul with its activation quantization); order non-null:
// the pairs grouped into tiles of one matrix each, run by the tiled prompt kernels (matmul_tiled_experts).
using MatmulFn = std::function<void(const MatmulArgs& m, const float* x, int act_rows, int P, float* y,
                                    const ExpertOrder* order)>;

// kernels/moe_hybrid.cu: the stream waits until *flag (host memory mapped into the device) reaches seq (wrapping
// compare); after ~60 s it gives up and sets *timed_out (device memory) so a lost CPU job cannot hang the GPU.
void wait_host_flag(cudaStream_t s, const volatile uint32_t* flag, uint32_t seq, uint32_t* timed_out);
// kernels/moe_hybrid.cu: y[0, n) = x[0, n) into mapped host memory (y its device address), then *flag = seq once all
// of it is visible to the host (one block): the CPU job polls the flag instead of a CUDA call.
void publish_to_host(cudaStream_t s, const float* x, size_t n, float* y, uint32_t* flag, uint32_t seq);

// Device scratch from the pool for the duration of one call (stream order makes the early return safe).
struct PoolScratch {
    DevicePool& pool;
    void* p;
    PoolScratch(DevicePool& pl, size_t bytes) : pool(pl), p(pl.get(bytes > 4 ? bytes : 4)) {}
    ~PoolScratch() { pool.put(p); }
    PoolScratch(const PoolScratch&) = delete;
    PoolScratch& operator=(const PoolScratch&) = delete;
    template <class T> T* as() const { return static_cast<T*>(p); }
};

// What the hybrid path did since start (DONE reports each request's share).
struct HybridCounters {
    int64_t hits = 0, lookups = 0;
    int64_t cpu_pairs = 0;       // (token, expert) pairs the CPU pool computed
    int64_t cpu_bytes = 0;       // expert weight bytes the CPU pool read (each missed expert once per call)
    double cpu_ms = 0;           // wall time of the CPU pool's miss computations
    double gpu_wait_ms = 0;      // GPU idle at the join, waiting for the CPU's results (timed with events)
    double host_wait_ms = 0;     // the CPU job waiting for the layer's activations to reach the host
    int64_t pcie_bytes = 0;      // expert bytes copied over PCIe to compute misses on the GPU (prompt chunks)
    double pcie_ms = 0;          // copy-stream time of those copies (events around each batch's copies)
    int64_t passes = 0;          // moe_experts calls (one per MoE layer per pass)
};

// A page-locked host buffer that grows on demand (contents are not kept when it grows); a mapped one can also be
// written by kernels at device().
class PinnedBuffer {
public:
    PinnedBuffer() = default;
    explicit PinnedBuffer(bool mapped) : mapped_(mapped) {}
    ~PinnedBuffer();
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;
    void* get(size_t bytes);
    void* device() const { return d_; }   // a mapped buffer's device address (after get)
private:
    void* p_ = nullptr;
    void* d_ = nullptr;
    size_t cap_ = 0;
    bool mapped_ = false;
};

class HybridMoe {
public:
    HybridMoe(const GpuOptions& opt, cudaStream_t stream, DevicePool& pool, MatmulFn matmul);
    ~HybridMoe();
    HybridMoe(const HybridMoe&) = delete;
    HybridMoe& operator=(const HybridMoe&) = delete;

    // True when the expert tensors of the model's layers go through the cache (prepare_weights skips them).
    bool caching() const { return caching_; }
    // Step 1 of prepare_weights: learns the layers' expert tensors.
    void register_layers(const ModelWeights& mw);
    // Whether prepare_weights should leave this weight in host memory (a cached layer's expert tensor).
    bool keeps_on_host(const Weight& w) const { return caching_ && w.data && host_tensors_.count(w.data); }
    // Before prepare: each MoE layer's router on the device (in register_layers' order), null where it is not an F32
    // [E, H] matrix; the prefetch worker (expert_prefetch.h) scores the next layer's router with them.
    void set_routers(std::vector<const float*> routers) { routers_ = std::move(routers); }
    // Step 2, after the other weights are on the device: sizes the cache from free VRAM, pins the experts, fills
    // the slots.
    void prepare();
    // A layer whose experts this path computes (false: the caller computes them from uploaded tensors).
    bool handles(const MoeWeights& w) const { return caching_ && layer_of(w) >= 0; }
    // Records the routing for --routing-profile-out (every MoE call of a known layer): host ids.
    void note_routing(const MoeWeights& w, const int32_t* ids, int n);
    // The same from ids on the device, counted there by a kernel on `s` (no host round trip, so a pass that only
    // records a profile can run as one graph); added to the profile when it is saved. Without the cache only.
    void count_routing(const MoeWeights& w, const int32_t* d_ids, int n, cudaStream_t s);
    // Queues x's copy to the host before the caller waits for the routing, so a decode-sized call's CPU job can
    // start the moment the routing is known (moe_experts then finds x there). Call before moe_experts, same x, T.
    void input_to_host(const MoeWeights& w, const float* x, int T);
    // gpu_work_before_join: queued after the cached experts and before the stream waits for the CPU's misses (the
    // caller's shared expert), so the GPU works while the CPU does; only called when the CPU computes misses.
    void moe_experts(const MoeWeights& w, const float* x, int T, int k, const int32_t* ids, const float* weights,
                     float* y, const std::function<void()>& gpu_work_before_join = {});

    // The device-driven join (hybrid_device.h) for a call of T ≤ 8 tokens × k ≤ 64 pairs, the dispatcher running,
    // decode kernels for the experts' types, and STRATA_HYBRID_DEVICE=1. Such calls can be captured in graphs.
    bool device_path(int T, int k) const;
    // Its plan for layer w (stream-ordered): returns the gate, up and down matrix tables (device) that moe_decode
    // reads; the CPU's pairs are null there and reach y through join_device.
    std::array<const uint8_t* const*, 3> plan_device(const MoeWeights& w, const float* x, int T, int k,
                                                      const int32_t* d_ids, const float* d_w);
    // y[T, H] += the CPU's share of the last planned call (waits on the stream for it; nothing without CPU pairs).
    void join_device(float* y, int T);
    // At a pass boundary (Backend::begin_graph): the dispatcher has consumed every device job, landed cache moves
    // become hits and due moves start (the slot map the plan reads changes only here or in host-path calls).
    void between_passes();
    // Right after a pass's graph was launched: the copies of the moves planned at the boundary (hybrid_device_join.cu).
    void after_pass_issued();

    int64_t hits() const { return cache_ ? cache_->hits() : 0; }
    int64_t lookups() const { return cache_ ? cache_->lookups() : 0; }
    HybridCounters counters();   // also folds in the join timings that have completed
    HybridTrace* trace() const { return trace_.get(); }   // STRATA_HYBRID_TRACE, else null
    std::vector<std::pair<std::string, std::string>> info() const;
    std::string summary() const;   // one line for logs: slots, hits, moves, CPU time
    std::string prefetch_summary() const;   // one line: the prefetch's predictions, copies and pairs served

private:
    void push_share();   // gpu_miss_share_ → DeviceJoinState::share, stream-ordered
    void tune_share(double pass_ns);       // the auto share after a counted pass (between_passes)
    void log_share_pass(double pass_ns);   // STRATA_SHARE_LOG: one counted pass (between_passes)
    double measure_pcie_rate();            // bytes a second the GPU reads from the pinned experts (at start)
    double auto_share() const { return share_balance_on_ ? share_bal_.share : share_ctl_.share; }
    struct Layer {
        Weight gate, up, down;                // host views (data: pinned piece or mapped file)
        size_t gate_bytes = 0, up_bytes = 0, down_bytes = 0;   // one expert's matrix of each
        uint8_t* d_gate = nullptr;            // slot arenas: slots × matrix bytes
        uint8_t* d_up = nullptr;
        uint8_t* d_down = nullptr;
        void* pinned = nullptr;               // the layer's pinned piece (gate | up | down), or null
        size_t pinned_size = 0;               // its bytes when it is mapped memory locked by cudaHostRegister
                                              // (0: from cudaHostAlloc)
    };
    struct PendingMoves {
        std::vector<CacheMove> moves;
        cudaEvent_t done = nullptr;
    };
    // The CPU pool's work for one call, run on the dispatcher thread (cpu_thread_) so moe_experts can return at
    // once: wait for the activations, compute the misses into h_out, then publish seq in the mapped flag.
    struct CpuJob {
        const Layer* layer = nullptr;
        const float* h_x = nullptr;
        std::vector<ExpertPair> misses;
        float* h_out = nullptr;
        uint32_t seq = 0;
    };
    struct JoinTiming {
        cudaEvent_t hits_done = nullptr, misses_in = nullptr;   // GPU idle for the CPU = the time between them
    };
    // One prompt-chunk batch of missed experts: pairs [begin, end) of the grouped misses, staged in one half of the
    // arena; for the tiled kernels its n_items tiles at word item_word of the route upload, the count at count_word.
    struct MissBatch {
        size_t begin = 0, end = 0;
        int experts = 0;
        size_t item_word = 0, count_word = 0;
        int n_items = 0;
    };

    int layer_of(const MoeWeights& w) const;
    bool register_mapped();   // page-locks the mapped file's expert span in place; false: copy instead
    void copy_expert(const Layer& L, int slot, int expert, cudaStream_t s);
    void copy_expert_to(const Layer& L, int expert, uint8_t* d_gate, uint8_t* d_up, uint8_t* d_down, int slot,
                        cudaStream_t s);
    // Experts expert … expert+count−1 into slots slot … slot+count−1 (one copy per matrix).
    void copy_experts_to(const Layer& L, int expert, int count, uint8_t* d_gate, uint8_t* d_up, uint8_t* d_down,
                         int slot, cudaStream_t s);
    void start_moves(int layer);   // plan_layer_moves, then its copies at once (after the compute stream's work)
    bool plan_layer_moves(int layer);   // the cache's moves of a layer into planned_ (evictions mirrored): any?
    void copy_after_compute();          // the copy stream waits for the compute stream's work queued so far
    void copy_planned_moves();          // planned_'s copies on the copy stream, each layer's done event → pending_
    void land_moves();   // moves whose copies finished become hits
    // Prompt chunks: the missed experts are copied into a staging arena and computed on the GPU (batches of
    // stage_slots_ experts, copies overlapping the previous batch's kernels), rows out[0 …) in the order of
    // `misses` (grouped by expert).
    void misses_on_gpu(const Layer& L, const float* x, const std::vector<ExpertPair>& misses,
                       const std::vector<MissBatch>& batches, const int32_t* d_route, const int32_t* d_stage,
                       const int32_t* d_token, float* out);
    void pin_experts();          // every layer's experts into a pinned piece, several layers at a time
    void unpin_experts();
    void harvest_copy_timings(bool wait);
    void cpu_thread_main();
    void submit_cpu_job(CpuJob job);
    void wait_cpu_idle();        // the previous job has finished (and rethrows its error)
    void harvest_join_timings(bool wait);
    void prepare_device_path();
    void mirror_slot(int layer, int expert);   // the pinned slot map's entry = the cache's
    void upload_slot_map();                    // its device copy, when an entry changed
    void drain_device_jobs();                  // the dispatcher has consumed every job posted (rethrows its error)
    void prepare_prefetch();                   // the prefetch worker's memory (prepare_device_path, when it can run)
    void launch_prefetch();                    // stops the running worker, starts this pass's (between_passes)
    void stop_prefetch();                      // the running worker leaves (waits for it)
    void free_prefetch();
    PrefetchWorkerArgs prefetch_args() const;  // what the worker and the pick kernel are given
    // The copy-engine mode (hybrid_prefetch_dma.cu): its thread, one request, its end.
    bool start_prefetch_dma();                 // false (and why in the log) when stream memory operations fail
    void prefetch_dma_main();
    void prefetch_dma_request(uint32_t s, int next, const PrefetchWorkerArgs& args);
    void stop_prefetch_dma();
    bool run_device_job();                     // the dispatcher: the next posted job, if any

    GpuOptions opt_;
    cudaStream_t stream_;
    cudaStream_t copy_stream_ = nullptr;      // cache moves and the initial fill
    cudaStream_t stage_stream_ = nullptr;     // staged misses' copies (misses_on_gpu)
    DevicePool& pool_;
    MatmulFn matmul_;
    bool caching_ = false;
    std::unordered_map<const uint8_t*, int> layer_by_data_;   // gate_exps data → layer index
    std::unordered_set<const uint8_t*> host_tensors_;          // the file data of every cached expert tensor
    std::vector<Layer> layers_;
    int n_experts_ = 0;
    size_t expert_bytes_ = 0;                 // mean bytes of one expert (gate + up + down)
    bool pinned_all_ = false;
    void* registered_ = nullptr;              // the mapped span locked in place by register_mapped, or null
    std::unique_ptr<ExpertCache> cache_;
    std::unique_ptr<RoutingProfile> profile_out_;
    uint32_t* d_route_counts_ = nullptr;        // [layer · E + expert], count_routing's counts (no cache)
    std::unique_ptr<CpuExpertPool> cpu_;
    std::vector<PendingMoves> pending_;
    std::vector<PendingMoves> planned_;          // planned at a boundary, copies not yet queued (done unset)
    cudaEvent_t x_ready_ = nullptr;           // activations copied to the host
    cudaEvent_t staging_free_ = nullptr;      // the pinned staging buffers may be rewritten
    PinnedBuffer h_route_, h_x_{true}, h_miss_;   // h_x_ mapped: publish_to_host writes it
    int64_t miss_pairs_ = 0, passes_ = 0;
    HybridCounters counters_;
    double pin_s_ = 0;                        // time to pin and fill the experts at start
    int64_t pinned_bytes_ = 0;
    int pin_threads_ = 0;
    const float* x_on_host_ = nullptr;        // input_to_host queued x's copy for the next moe_experts (T rows)
    int x_on_host_T_ = 0;
    std::vector<JoinTiming> copy_timings_, free_copy_timings_;   // around prompt-chunk copy batches

    // Staging arena for prompt chunks' misses (allocated at first use): two halves of stage_slots_ experts.
    int stage_slots_ = 0;
    double gpu_miss_share_ = 0;                 // GpuOptions::gpu_miss_share, or STRATA_GPU_MISS_SHARE; the current one
    bool share_auto_ = false;                   // auto: the device join's MissShareControl sets it between passes
    int stage_half_ = 0;                        // the half the next batch uses
    uint8_t *d_stage_gate_ = nullptr, *d_stage_up_ = nullptr, *d_stage_down_ = nullptr;
    cudaEvent_t stage_ready_[2] = {nullptr, nullptr};   // a half's copies are done (copy stream)
    cudaEvent_t stage_free_[2] = {nullptr, nullptr};    // the kernels reading a half are done (compute stream)

    // The join: host → GPU flag (mapped pinned word), the dispatcher thread, timing event pairs.
    bool async_join_ = true;                    // STRATA_HYBRID_JOIN=host: the calling thread computes the misses
    std::atomic<uint32_t>* flag_ = nullptr;     // in mapped pinned memory
    uint32_t* d_flag_ = nullptr;                // its device address
    std::atomic<uint32_t>* x_flag_ = nullptr;   // word 2 of the mapped page: the activations of job seq arrived
    uint32_t* d_x_flag_ = nullptr;
    uint32_t* d_timed_out_ = nullptr;           // word 1 of the mapped page: set by the wait kernel on time-out
    volatile uint32_t* h_timed_out_ = nullptr;
    uint32_t seq_ = 0;
    std::thread cpu_thread_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool job_ready_ = false, job_running_ = false, quit_ = false;
    std::atomic<uint64_t> posted_{0};           // jobs submitted (the dispatcher polls it before it sleeps)
    CpuJob job_;
    std::exception_ptr job_error_;
    double job_wait_s_ = 0;                     // written by the dispatcher under mu_
    std::vector<JoinTiming> timings_, free_timings_;

    // The device-driven join (hybrid_device.h), set up by prepare_device_path when the dispatcher runs.
    std::atomic<bool> device_on_{false};        // on unless STRATA_HYBRID_DEVICE=0 (set once, after the rest)
    uint8_t* ring_ = nullptr;                   // mapped ring of kRingSlots jobs (host address; ring_dev_ on the GPU)
    uint8_t* ring_dev_ = nullptr;
    size_t slot_bytes_ = 0;
    DeviceJoinWords* words_ = nullptr;          // mapped (host address), words_dev_ on the GPU
    DeviceJoinWords* words_dev_ = nullptr;
    int32_t* slot_map_ = nullptr;               // pinned [layer · E + expert] → slot or −1: the cache's, mirrored
    int32_t* slot_map_gpu_ = nullptr;           // its device copy the plan reads (upload_slot_map)
    bool slot_map_dirty_ = false;
    DeviceJoinState* state_ = nullptr;          // device
    std::vector<std::array<const uint8_t*, 3>> zero_copy_;   // per layer: gate, up, down tensors' device addresses
    uint32_t dev_taken_ = 0;                    // the last device job the dispatcher finished (its thread only)
    std::atomic<int64_t> armed_until_ns_{0};    // the dispatcher polls without sleeping until then
    CpuShare dev_share_;                        // the dispatcher's CPU pairs of one job (experts/device_jobs.h)
    bool zero_copy_any_ = false;                // some layer's experts are mapped for zero-copy reads
    uint8_t* zc_stage_[3] = {nullptr, nullptr, nullptr};   // zero-copy staging slots: gate, up, down (kStageExperts each)
    size_t stage_stride_[3] = {0, 0, 0};        // their stride: the largest matrix of each kind (also the prefetch's)
    MissShareControl share_ctl_;                // auto share (STRATA_SHARE_CONTROL=climb): fed each pass's time
    // Auto share by MissShareBalance (the default; STRATA_SHARE_CONTROL=climb: share_ctl_), fed each pass with the
    // layers that had missed experts (miss_jobs_, counted by the dispatcher), the joins that waited for the CPU
    // (DeviceJoinWords::late_joins), the CPU pool's rate (averaged over passes) and the PCIe rate measured at start.
    bool share_balance_on_ = true;
    MissShareBalance share_bal_;
    std::atomic<uint32_t> miss_jobs_{0};        // device jobs with a missed expert (the dispatcher's count)
    uint32_t ctl_miss_jobs_ = 0, ctl_late_ = 0; // both counts at the last pass boundary
    int64_t ctl_cpu_bytes_ = 0;                 // counters_.cpu_bytes and the pool's seconds then
    double ctl_cpu_s_ = 0;
    double cpu_rate_ = 0, pcie_rate_ = 0;       // bytes a second
    double share_log_late_ = 0, share_log_target_ = 0;   // STRATA_SHARE_LOG sums of the late fraction and its target
    int64_t ctl_last_ns_ = 0;                   // the last pass boundary
    uint32_t ctl_consumed_ = 0;                 // words_->consumed then (a pass without device jobs is not counted)
    // STRATA_SHARE_LOG=1: one log line every kShareLogPasses counted passes (the share's path, the mean pass and
    // the GPU's wait for the CPU over them), to see how the auto share moves in a run.
    static constexpr int kShareLogPasses = 64;
    bool share_log_ = false;
    int share_log_n_ = 0;
    double share_log_pass_ns_ = 0, share_log_share_ = 0;
    unsigned long long share_log_wait_ns_ = 0;   // words_->wait_ns at the last line
    std::unique_ptr<HybridTrace> trace_;         // STRATA_HYBRID_TRACE=1 (hybrid_trace.h), else null

    // The prefetch of predicted misses (expert_prefetch.h): on unless STRATA_PREFETCH=0, when every layer's experts
    // can be read zero-copy, staging slots exist and the routers are F32.
    std::vector<const float*> routers_;          // set_routers
    bool prefetch_on_ = false;
    cudaStream_t pf_stream_ = nullptr;           // the worker's (non-blocking)
    PrefetchBoard* pf_board_ = nullptr;          // device
    float* pf_x_ = nullptr;                      // device [2][H]
    float* pf_logits_ = nullptr;                 // device [E]
    PrefetchWords* pf_words_ = nullptr;          // mapped (host address); pf_words_dev_ on the GPU
    PrefetchWords* pf_words_dev_ = nullptr;
    uint8_t* pf_area_[3] = {nullptr, nullptr, nullptr};   // prefetch slots, stage_stride_ apart
    PrefetchLayer* pf_layers_ = nullptr;         // device [L]: each layer's router, host tensors and matrix bytes
    uint32_t pf_tag_ = 0;                        // the running worker's tag
    int pf_blocks_ = 16;                         // STRATA_PREFETCH_BLOCKS
    bool pf_after_stage_ = true;                 // STRATA_PREFETCH_AFTER_STAGE=0: copy while the stage kernel runs
    int pf_depth_ = 1;                           // STRATA_PREFETCH_DEPTH: loads in flight a worker thread (1 … 4)
    int pf_copies_ = kPrefetchSlots;             // STRATA_PREFETCH_COPIES: experts copied a layer at most (0: none)
    // The copy-engine mode (STRATA_PREFETCH_MODE=dma): no worker; a thread launches a pick kernel a layer and queues
    // the copies and their publication on pf_copy_stream_ (hybrid_prefetch_dma.cu).
    bool pf_dma_ = false;
    cudaStream_t pf_copy_stream_ = nullptr;
    cudaEvent_t pf_copies_done_ = nullptr;       // after the last layer's queued copies
    PrefetchPick* pf_pick_ = nullptr;            // mapped (host address); pf_pick_dev_ on the GPU
    PrefetchPick* pf_pick_dev_ = nullptr;
    void* pf_wait_fn_ = nullptr;                 // cuStreamWaitValue32, cuStreamWriteValue32 (driver entry points)
    void* pf_write_fn_ = nullptr;
    std::thread pf_thread_;
    std::atomic<bool> pf_quit_{false};
    std::string pf_error_;
    uint64_t pf_dma_copied_ = 0, pf_dma_bytes_ = 0, pf_dma_late_ = 0;   // the thread's counts (read after it ends)
};

}  // namespace strata::cuda
