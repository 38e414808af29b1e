// HybridMoe: slot arenas, pinned expert pieces, the split of a layer's (token, expert) pairs into GPU hits and CPU
// misses, and cache moves on their own stream (they wait for the compute stream's earlier reads of the slot and are
// polled, never waited for).
#include "backend/cuda/hybrid_moe.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#include "backend/cuda/cuda_check.h"
#include "common/error.h"
#include "common/log.h"

namespace strata::cuda {

PinnedBuffer::~PinnedBuffer() {
    if (p_) cudaFreeHost(p_);
}

void* PinnedBuffer::get(size_t bytes) {
    if (bytes <= cap_) return p_;
    if (p_) CUDA_CHECK(cudaFreeHost(p_));
    p_ = nullptr;
    cap_ = 0;
    const size_t want = std::max<size_t>(bytes + bytes / 2, 4096);
    CUDA_CHECK(cudaHostAlloc(&p_, want, mapped_ ? cudaHostAllocMapped : cudaHostAllocDefault));
    if (mapped_) CUDA_CHECK(cudaHostGetDevicePointer(&d_, p_, 0));
    cap_ = want;
    return p_;
}

namespace {
using Scratch = PoolScratch;
// Pairs per tile: at most the tiled kernel's activation rows per block for experts (kExpertTile, matmul_tiled.cu).
constexpr int kTilePairs = 32;

size_t matrix_bytes(const Weight& w) { return (size_t)w.ne[1] * w.row_bytes; }
}  // namespace

HybridMoe::HybridMoe(const GpuOptions& opt, cudaStream_t stream, DevicePool& pool, MatmulFn matmul)
    : opt_(opt), stream_(stream), pool_(pool), matmul_(std::move(matmul)) {
    caching_ = !opt.expert_cache.empty();
    if (caching_) parse_cache_size(opt.expert_cache);   // a bad value fails before any upload
    CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stage_stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&x_ready_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&staging_free_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(staging_free_, stream_));
    share_auto_ = opt.gpu_miss_share < 0;
    gpu_miss_share_ = share_auto_ ? 0.0 : std::clamp(opt.gpu_miss_share, 0.0, 1.0);
    if (const char* share = std::getenv("STRATA_GPU_MISS_SHARE")) {
        char* end = nullptr;
        const double v = std::strtod(share, &end);
        share_auto_ = std::strcmp(share, "auto") == 0;
        STRATA_CHECK(share_auto_ || (end != share && *end == 0 && v >= 0 && v <= 1), "STRATA_GPU_MISS_SHARE=", share,
                     " is neither auto nor a share between 0 and 1");
        gpu_miss_share_ = share_auto_ ? 0.0 : v;
    }
    if (const char* ctl = std::getenv("STRATA_SHARE_CONTROL")) {   // how the auto share is tuned (experts/miss_share.h)
        STRATA_CHECK(std::strcmp(ctl, "balance") == 0 || std::strcmp(ctl, "climb") == 0, "STRATA_SHARE_CONTROL=", ctl,
                     " is neither balance nor climb");
        share_balance_on_ = std::strcmp(ctl, "balance") == 0;
    }
    const char* join = std::getenv("STRATA_HYBRID_JOIN");
    async_join_ = !(join && std::strcmp(join, "host") == 0);
    if (caching_ && async_join_) {
        void* p = nullptr;
        CUDA_CHECK(cudaHostAlloc(&p, 64, cudaHostAllocMapped));
        flag_ = new (p) std::atomic<uint32_t>(0);
        void* d = nullptr;
        CUDA_CHECK(cudaHostGetDevicePointer(&d, p, 0));
        d_flag_ = static_cast<uint32_t*>(d);
        d_timed_out_ = d_flag_ + 1;
        h_timed_out_ = static_cast<volatile uint32_t*>(p) + 1;
        *h_timed_out_ = 0;
        x_flag_ = new (static_cast<uint32_t*>(p) + 2) std::atomic<uint32_t>(0);
        d_x_flag_ = d_flag_ + 2;
        cpu_thread_ = std::thread([this] { cpu_thread_main(); });
    }
}

HybridMoe::~HybridMoe() {
    if (device_on_) cudaStreamSynchronize(stream_);   // device jobs still in flight need the dispatcher: before it quits
    if (cpu_thread_.joinable()) {
        {
            std::lock_guard<std::mutex> lk(mu_);
            quit_ = true;
        }
        cv_.notify_all();
        cpu_thread_.join();
    }
    cudaStreamSynchronize(stream_);
    cudaStreamSynchronize(copy_stream_);
    cudaStreamSynchronize(stage_stream_);
    try {
        harvest_join_timings(true);
        harvest_copy_timings(true);
    } catch (const Error& e) {
        log_warn("experts", e.what());
    }
    stop_prefetch();   // the worker leaves (and leaves its statistics) before the summary and the memory it reads go
    if (cache_) log_info("experts", summary());
    if (profile_out_) {
        try {
            if (d_route_counts_) {
                std::vector<uint32_t> c((size_t)layers_.size() * n_experts_);
                CUDA_CHECK(cudaMemcpy(c.data(), d_route_counts_, c.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost));
                for (size_t l = 0; l < layers_.size(); ++l)
                    for (int e = 0; e < n_experts_; ++e) profile_out_->add_count((int)l, e, c[l * n_experts_ + e]);
            }
            profile_out_->save(opt_.routing_profile_out);
            log_info("experts", "routing profile written to " + opt_.routing_profile_out);
        } catch (const Error& e) {
            log_warn("experts", e.what());
        }
    }
    for (PendingMoves& p : pending_) cudaEventDestroy(p.done);
    for (JoinTiming& t : timings_) { cudaEventDestroy(t.hits_done); cudaEventDestroy(t.misses_in); }
    for (JoinTiming& t : free_timings_) { cudaEventDestroy(t.hits_done); cudaEventDestroy(t.misses_in); }
    for (JoinTiming& t : copy_timings_) { cudaEventDestroy(t.hits_done); cudaEventDestroy(t.misses_in); }
    for (JoinTiming& t : free_copy_timings_) { cudaEventDestroy(t.hits_done); cudaEventDestroy(t.misses_in); }
    for (Layer& L : layers_) {
        cudaFree(L.d_gate);
        cudaFree(L.d_up);
        cudaFree(L.d_down);
    }
    free_prefetch();
    unpin_experts();
    cudaFree(d_stage_gate_);
    cudaFree(d_stage_up_);
    cudaFree(d_stage_down_);
    for (uint8_t* d : zc_stage_) cudaFree(d);
    for (int h = 0; h < 2; ++h) {
        if (stage_ready_[h]) cudaEventDestroy(stage_ready_[h]);
        if (stage_free_[h]) cudaEventDestroy(stage_free_[h]);
    }
    if (flag_) cudaFreeHost(flag_);
    if (ring_) cudaFreeHost(ring_);
    if (words_) cudaFreeHost(words_);
    if (slot_map_) cudaFreeHost(slot_map_);
    cudaFree(slot_map_gpu_);
    cudaFree(state_);
    cudaFree(d_route_counts_);
    if (registered_) cudaHostUnregister(registered_);
    cudaEventDestroy(x_ready_);
    cudaEventDestroy(staging_free_);
    cudaStreamDestroy(copy_stream_);
    cudaStreamDestroy(stage_stream_);
}

int HybridMoe::layer_of(const MoeWeights& w) const {
    auto it = layer_by_data_.find(w.gate_exps.data);
    return it == layer_by_data_.end() ? -1 : it->second;
}

void HybridMoe::register_layers(const ModelWeights& mw) {
    for (const LayerWeights& lw : mw.layers) {
        const MoeWeights& m = lw.moe;
        if (!m.gate_exps.present()) continue;
        STRATA_CHECK(n_experts_ == 0 || m.gate_exps.ne[2] == n_experts_, "experts: layer ", layers_.size(), " has ",
                     m.gate_exps.ne[2], " experts, earlier layers ", n_experts_);
        n_experts_ = (int)m.gate_exps.ne[2];
        Layer L;
        L.gate = m.gate_exps;
        L.up = m.up_exps;
        L.down = m.down_exps;
        L.gate_bytes = matrix_bytes(L.gate);
        L.up_bytes = matrix_bytes(L.up);
        L.down_bytes = matrix_bytes(L.down);
        layer_by_data_[m.gate_exps.data] = (int)layers_.size();
        for (const Weight* t : {&m.gate_exps, &m.up_exps, &m.down_exps}) host_tensors_.insert(t->data);
        layers_.push_back(L);
    }
    if (!opt_.routing_profile_out.empty() && !layers_.empty())
        profile_out_ = std::make_unique<RoutingProfile>((int)layers_.size(), n_experts_);
}

void HybridMoe::prepare() {
    if (!caching_ || layers_.empty()) {
        caching_ = false;
        if (profile_out_) {     // count_routing's counters, zeroed here (outside any graph capture)
            const size_t bytes = layers_.size() * (size_t)n_experts_ * sizeof(uint32_t);
            CUDA_CHECK(cudaMalloc(&d_route_counts_, bytes));
            CUDA_CHECK(cudaMemset(d_route_counts_, 0, bytes));
        }
        return;
    }
    const int L_n = (int)layers_.size();
    size_t sum = 0;
    for (const Layer& L : layers_) sum += L.gate_bytes + L.up_bytes + L.down_bytes;
    expert_bytes_ = sum / L_n;

    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    // STRATA_CUDA_VRAM_MIB: size the cache as on a card of that many MiB (a consumer card's stand-in on a bigger
    // GPU): what is in use now (the CUDA context, the dense weights) counts against it as it would there.
    if (const char* v = std::getenv("STRATA_CUDA_VRAM_MIB"); v && std::atoll(v) > 0) {
        const int64_t card_mib = std::atoll(v);
        const size_t card = (size_t)card_mib << 20, used = total_b - free_b;
        free_b = card > used ? std::min(free_b, card - used) : 0;
    }
    const size_t reserve = ((size_t)opt_.vram_reserve_mib << 20) + (size_t)opt_.context_reserve_bytes;
    const int64_t slots = resolve_cache_slots(parse_cache_size(opt_.expert_cache), expert_bytes_, free_b, reserve,
                                              (int64_t)L_n * n_experts_, opt_.gpu_experts_max);
    std::unique_ptr<RoutingProfile> profile;
    if (!opt_.routing_profile.empty()) profile = std::make_unique<RoutingProfile>(RoutingProfile::load(opt_.routing_profile));
    cache_ = std::make_unique<ExpertCache>(L_n, n_experts_, slots, profile.get(), opt_.adapt);
    cpu_ = std::make_unique<CpuExpertPool>(opt_.cpu_workers, opt_.f32_activations);
    stage_slots_ = std::max(1, std::min(64, n_experts_ / 4));

    pin_experts();

    for (int l = 0; l < L_n; ++l) {
        Layer& L = layers_[l];
        const size_t n = (size_t)cache_->slots(l);
        if (!n) continue;
        CUDA_CHECK(cudaMalloc(&L.d_gate, n * L.gate_bytes));
        CUDA_CHECK(cudaMalloc(&L.d_up, n * L.up_bytes));
        CUDA_CHECK(cudaMalloc(&L.d_down, n * L.down_bytes));
        for (int s = 0; s < (int)n; ++s) copy_expert(L, s, cache_->expert_in(l, s), copy_stream_);
    }
    CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
    prepare_device_path();
    log_info("experts", fmt("expert cache: ", cache_->total_slots(), " of ", (int64_t)L_n * n_experts_,
                            " experts in VRAM (", (cache_->total_slots() * expert_bytes_) >> 20, " MiB, ",
                            expert_bytes_, " bytes each), ", free_b >> 20, " MiB were free, ",
                            opt_.context_reserve_bytes >> 20, " MiB kept for the context and the MTP head, ",
                            opt_.vram_reserve_mib, " MiB reserve; ", cpu_->workers(),
                            " CPU workers; experts pinned in ", (int)(pin_s_ * 1000), " ms",
                            registered_ ? " (the mapped file, in place)" : " (copied)",
                            profile ? ", filled from " + opt_.routing_profile : std::string(", filled by expert id")));
}

void HybridMoe::copy_expert(const Layer& L, int slot, int expert, cudaStream_t s) {
    copy_expert_to(L, expert, L.d_gate, L.d_up, L.d_down, slot, s);
}

void HybridMoe::copy_expert_to(const Layer& L, int expert, uint8_t* d_gate, uint8_t* d_up, uint8_t* d_down, int slot,
                               cudaStream_t s) {
    copy_experts_to(L, expert, 1, d_gate, d_up, d_down, slot, s);
}

void HybridMoe::copy_experts_to(const Layer& L, int expert, int count, uint8_t* d_gate, uint8_t* d_up,
                                uint8_t* d_down, int slot, cudaStream_t s) {
    CUDA_CHECK(cudaMemcpyAsync(d_gate + (size_t)slot * L.gate_bytes, L.gate.matrix(expert), count * L.gate_bytes,
                               cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(d_up + (size_t)slot * L.up_bytes, L.up.matrix(expert), count * L.up_bytes,
                               cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(d_down + (size_t)slot * L.down_bytes, L.down.matrix(expert), count * L.down_bytes,
                               cudaMemcpyHostToDevice, s));
}

void HybridMoe::note_routing(const MoeWeights& w, const int32_t* ids, int n) {
    if (!profile_out_) return;
    const int l = layer_of(w);
    if (l >= 0) profile_out_->add(l, ids, n);
}

namespace {
__global__ void count_routes_kernel(const int32_t* ids, int n, int n_experts, uint32_t* counts) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && ids[i] >= 0 && ids[i] < n_experts) atomicAdd(&counts[ids[i]], 1u);
}
}  // namespace

void HybridMoe::count_routing(const MoeWeights& w, const int32_t* d_ids, int n, cudaStream_t s) {
    const int l = layer_of(w);
    if (l < 0 || !d_route_counts_ || n <= 0) return;
    count_routes_kernel<<<(n + 255) / 256, 256, 0, s>>>(d_ids, n, n_experts_, d_route_counts_ + (size_t)l * n_experts_);
    CUDA_CHECK_LAUNCH();
}

void HybridMoe::land_moves() {
    for (size_t i = 0; i < pending_.size();) {
        const cudaError_t st = cudaEventQuery(pending_[i].done);
        if (st == cudaErrorNotReady) { ++i; continue; }
        CUDA_CHECK(st);
        for (const CacheMove& m : pending_[i].moves) {
            cache_->finish_move(m);
            mirror_slot(m.layer, m.new_expert);
        }
        CUDA_CHECK(cudaEventDestroy(pending_[i].done));
        pending_.erase(pending_.begin() + i);
    }
}

bool HybridMoe::plan_layer_moves(int layer) {
    std::vector<CacheMove> moves = cache_->plan_moves(layer);
    if (moves.empty()) return false;
    for (const CacheMove& m : moves)   // the evicted experts are misses from now on (the new ones once landed)
        if (m.old_expert >= 0) mirror_slot(layer, m.old_expert);
    planned_.push_back(PendingMoves{std::move(moves), nullptr});
    return true;
}

void HybridMoe::copy_planned_moves() {
    for (PendingMoves& p : planned_) {
        for (const CacheMove& m : p.moves) copy_expert(layers_[m.layer], m.slot, m.new_expert, copy_stream_);
        CUDA_CHECK(cudaEventCreateWithFlags(&p.done, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventRecord(p.done, copy_stream_));
        pending_.push_back(std::move(p));
    }
    planned_.clear();
}

void HybridMoe::start_moves(int layer) {
    if (!plan_layer_moves(layer)) return;
    // The copies overwrite slots that kernels queued so far may still read: they wait for the compute stream.
    copy_after_compute();
    copy_planned_moves();
}

void HybridMoe::copy_after_compute() {
    cudaEvent_t reads_done;
    CUDA_CHECK(cudaEventCreateWithFlags(&reads_done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(reads_done, stream_));
    CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, reads_done, 0));
    CUDA_CHECK(cudaEventDestroy(reads_done));   // released once the wait has consumed it
}

void HybridMoe::input_to_host(const MoeWeights& w, const float* x, int T) {
    x_on_host_ = nullptr;
    const int l = layer_of(w);
    if (l < 0 || !cache_ || T <= 0 || T >= opt_.gpu_miss_min_tokens) return;
    // h_x_ may be reallocated below: the previous layer's CPU job must be done with it (the stream waits for that
    // job anyway before this copy can run, so the host gives up nothing here).
    if (cpu_thread_.joinable()) wait_cpu_idle();
    const size_t bytes = (size_t)T * layers_[l].gate.ne[0] * 4;
    CUDA_CHECK(cudaMemcpyAsync(h_x_.get(bytes), x, bytes, cudaMemcpyDeviceToHost, stream_));
    x_on_host_ = x;
    x_on_host_T_ = T;
}

void HybridMoe::moe_experts(const MoeWeights& w, const float* x, int T, int k, const int32_t* ids,
                            const float* weights, float* y, const std::function<void()>& gpu_work_before_join) {
    const int l = layer_of(w);
    STRATA_ASSERT(l >= 0 && cache_);
    const Layer& L = layers_[l];
    const int H = (int)L.gate.ne[0], I = (int)L.gate.ne[1];
    const int P = T * k;
    // input_to_host copied x before the caller synchronised the stream for the routing: it is on the host now.
    const bool x_here = x_on_host_ == x && x_on_host_T_ == T;
    x_on_host_ = nullptr;
    if (!P) return;
    if (cpu_thread_.joinable()) wait_cpu_idle();   // the previous layer's job (long done: its join gated routing)
    drain_device_jobs();                             // a device pass's jobs: the cache is this thread's now
    STRATA_CHECK(!h_timed_out_ || *h_timed_out_ == 0, "experts: the GPU gave up waiting for the CPU pool's results");
    land_moves();
    harvest_join_timings(false);
    harvest_copy_timings(false);
    note_routing(w, ids, P);
    cache_->record(l, ids, P);
    ++passes_;
    ++counters_.passes;

    // Misses grouped by expert (a prompt chunk's pairs of one expert run next to each other and share its weights);
    // hits grouped by slot. Rows of the expert outputs: hits 0 … Ph−1, then the misses.
    std::vector<std::pair<int, int>> hit_pairs;   // (slot, pair)
    std::vector<int> miss_pair;
    for (int p = 0; p < P; ++p) {
        const int s = cache_->slot_of(l, ids[p]);
        if (s >= 0) hit_pairs.push_back({s, p});
        else miss_pair.push_back(p);
    }
    std::stable_sort(miss_pair.begin(), miss_pair.end(), [&](int a, int b) { return ids[a] < ids[b]; });
    const int Pm = (int)miss_pair.size();
    std::vector<ExpertPair> misses(Pm);
    int distinct = 0;
    for (int i = 0; i < Pm; ++i) {
        misses[i] = ExpertPair{miss_pair[i] / k, ids[miss_pair[i]]};
        distinct += i == 0 || misses[i].expert != misses[i - 1].expert;
    }
    miss_pairs_ += Pm;
    // The misses' split: the first Pg pairs (grouped order) are staged over PCIe and computed on the GPU, the other
    // Pc by the CPU pool. Prompt chunks stage all; decode calls the first gpu_miss_share of their missed experts.
    const StagedSplit staged = staged_split(misses, T >= opt_.gpu_miss_min_tokens, gpu_miss_share_);
    const int Pg = staged.pairs, Pc = Pm - Pg;
    const bool gpu_misses = Pg > 0, cpu_misses = Pc > 0;

    // CPU misses start first: the job needs only x on the host and the list of misses.
    float* h_x = nullptr;
    float* h_out = nullptr;
    uint32_t seq = 0;
    std::vector<ExpertPair> cpu_part(misses.begin() + Pg, misses.end());
    if (cpu_misses) {
        h_x = static_cast<float*>(h_x_.get((size_t)T * H * 4));   // input_to_host's buffer when x_here
        h_out = static_cast<float*>(h_miss_.get((size_t)Pc * H * 4));
        counters_.cpu_pairs += Pc;
        counters_.cpu_bytes += (int64_t)(distinct - staged.experts) * (int64_t)(L.gate_bytes + L.up_bytes + L.down_bytes);
        if (cpu_thread_.joinable()) {
            seq = ++seq_;
            if (x_here) x_flag_->store(seq, std::memory_order_release);
            else publish_to_host(stream_, x, (size_t)T * H, static_cast<float*>(h_x_.device()), d_x_flag_, seq);
            submit_cpu_job(CpuJob{&L, h_x, cpu_part, h_out, seq});
        } else if (!x_here) {
            CUDA_CHECK(cudaMemcpyAsync(h_x, x, (size_t)T * H * 4, cudaMemcpyDeviceToHost, stream_));
            CUDA_CHECK(cudaEventRecord(x_ready_, stream_));
        }
    }

    std::stable_sort(hit_pairs.begin(), hit_pairs.end(),
                     [](const std::pair<int, int>& a, const std::pair<int, int>& b) { return a.first < b.first; });
    const int Ph = (int)hit_pairs.size();
    // Prompt-sized calls run the tiled kernels, tiles built here (the pairs are grouped already).
    const bool tiled = T >= kTiledMinRows && tiled_enabled() && tiled_supported(L.gate.type, H) &&
                       tiled_supported(L.up.type, H) && tiled_supported(L.down.type, I);

    // The route upload, in 32-bit words: slots and tokens of the hits, row_of_pair, weights, then for GPU misses
    // their staging slots and tokens; then (tiled) the tiles of the hits and of each miss batch, and their counts.
    std::vector<int32_t> words((size_t)2 * Ph + 2 * (size_t)P + 2 * (size_t)Pg);
    int32_t* hit_slot = words.data();
    int32_t* hit_token = hit_slot + Ph;
    int32_t* row_of_pair = hit_token + Ph;
    std::memcpy(row_of_pair + P, weights, (size_t)P * 4);
    for (int i = 0; i < Ph; ++i) {
        hit_slot[i] = hit_pairs[i].first;
        hit_token[i] = hit_pairs[i].second / k;
        row_of_pair[hit_pairs[i].second] = i;
    }
    for (int i = 0; i < Pm; ++i) row_of_pair[miss_pair[i]] = Ph + i;
    const size_t stage_word = (size_t)2 * Ph + 2 * (size_t)P;
    std::vector<MissBatch> batches;
    if (gpu_misses) {
        // Batches of stage_slots_ distinct experts; a pair's staging slot is its expert's place in the batch.
        std::vector<int32_t> slot;
        for (const StageBatch& b : stage_batches(misses, Pg, stage_slots_, slot))
            batches.push_back(MissBatch{b.begin, b.end, b.experts});
        int32_t* stage = words.data() + stage_word;
        for (int i = 0; i < Pg; ++i) {
            stage[i] = slot[i];
            stage[Pg + i] = misses[i].token;
        }
    }
    size_t hit_item_word = 0, count_word = 0;
    int hit_items = 0;
    if (tiled) {
        std::vector<int32_t> tiles;   // built apart: appending to words would move the groups read
        hit_items = append_pair_tiles(hit_slot, 0, (size_t)Ph, kTilePairs, tiles);
        for (MissBatch& b : batches) {
            b.item_word = tiles.size();
            b.n_items = append_pair_tiles(words.data() + stage_word, b.begin, b.end, kTilePairs, tiles);
        }
        words.resize((words.size() + 3) / 4 * 4);   // tiles are int4: 16-byte aligned
        hit_item_word = words.size();
        for (MissBatch& b : batches) b.item_word += hit_item_word;
        words.insert(words.end(), tiles.begin(), tiles.end());
        count_word = words.size();
        words.push_back(hit_items);
        for (MissBatch& b : batches) {
            b.count_word = words.size();
            words.push_back(b.n_items);
        }
    }

    // Staging buffers of the previous call are free once its uploads ran (long done: routing synchronised since).
    CUDA_CHECK(cudaEventSynchronize(staging_free_));
    int32_t* h_route = static_cast<int32_t*>(h_route_.get(words.size() * 4));
    std::memcpy(h_route, words.data(), words.size() * 4);
    Scratch route(pool_, words.size() * 4);
    CUDA_CHECK(cudaMemcpyAsync(route.p, h_route, words.size() * 4, cudaMemcpyHostToDevice, stream_));
    const int32_t* d_route = route.as<int32_t>();
    const int32_t* d_slot = d_route;
    const int32_t* d_token = d_slot + Ph;
    const int32_t* d_row = d_slot + 2 * Ph;
    const float* d_w = reinterpret_cast<const float*>(d_row + P);
    const int32_t* d_stage = d_route + stage_word;

    Scratch out(pool_, (size_t)P * H * 4);   // expert outputs: hits, then misses
    if (Ph) {
        ExpertOrder hit_order;
        hit_order.items = reinterpret_cast<int4*>(const_cast<int32_t*>(d_route + hit_item_word));
        hit_order.n_items = const_cast<int32_t*>(d_route + count_word);
        hit_order.max_items = hit_items;
        const ExpertOrder* order = tiled ? &hit_order : nullptr;
        Scratch xg(pool_, (size_t)Ph * H * 4), gate(pool_, (size_t)Ph * I * 4), up(pool_, (size_t)Ph * I * 4);
        gather_rows(stream_, x, d_token, Ph, H, xg.as<float>());
        auto args = [&](const Weight& e, const uint8_t* arena, int rows, int n) {
            MatmulArgs m;
            m.type = e.type;
            m.w = arena;
            m.row_bytes = e.row_bytes;
            m.rows = rows;
            m.n = n;
            m.mat_stride = (size_t)rows * e.row_bytes;
            m.ids = d_slot;
            m.act_div = 1;
            return m;
        };
        matmul_(args(L.gate, L.d_gate, I, H), xg.as<float>(), Ph, Ph, gate.as<float>(), order);
        matmul_(args(L.up, L.d_up, I, H), xg.as<float>(), Ph, Ph, up.as<float>(), order);
        swiglu(stream_, gate.as<float>(), up.as<float>(), (size_t)Ph * I, gate.as<float>());
        matmul_(args(L.down, L.d_down, H, I), gate.as<float>(), Ph, Ph, out.as<float>(), order);
    }
    // The caller's GPU work that does not need the experts (its shared expert) goes before anything that waits:
    // the staged misses' copies, the CPU's results.
    if (cpu_misses && gpu_work_before_join) gpu_work_before_join();
    if (gpu_misses) {
        misses_on_gpu(L, x, misses, batches, tiled ? d_route : nullptr, d_stage, d_stage + Pg,
                      out.as<float>() + (size_t)Ph * H);
    }
    if (cpu_misses) {
        // The CPU pool computes its misses while the GPU works on the rest; the results meet on the GPU: the stream
        // waits for the mapped flag the CPU job sets, then copies them in. The host returns at once and queues the
        // work after this layer behind the wait.
        JoinTiming jt;
        if (!free_timings_.empty()) {
            jt = free_timings_.back();
            free_timings_.pop_back();
        } else {
            CUDA_CHECK(cudaEventCreate(&jt.hits_done));
            CUDA_CHECK(cudaEventCreate(&jt.misses_in));
        }
        CUDA_CHECK(cudaEventRecord(jt.hits_done, stream_));
        if (seq) {
            wait_host_flag(stream_, d_flag_, seq, d_timed_out_);
        } else {
            const auto t0 = std::chrono::steady_clock::now();
            if (!x_here) CUDA_CHECK(cudaEventSynchronize(x_ready_));
            counters_.host_wait_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            cpu_->compute(L.gate, L.up, L.down, h_x, cpu_part, h_out);
        }
        CUDA_CHECK(cudaEventRecord(jt.misses_in, stream_));
        timings_.push_back(jt);
        CUDA_CHECK(cudaMemcpyAsync(out.as<float>() + (size_t)(Ph + Pg) * H, h_out, (size_t)Pc * H * 4,
                                   cudaMemcpyHostToDevice, stream_));
    }
    CUDA_CHECK(cudaEventRecord(staging_free_, stream_));
    moe_combine_rows(stream_, out.as<float>(), d_row, d_w, T, k, H, y);
    start_moves(l);
}

std::vector<std::pair<std::string, std::string>> HybridMoe::info() const {
    if (!cache_) return {};
    const int64_t total = (int64_t)layers_.size() * n_experts_;
    return {{"expert_cache_slots", std::to_string(cache_->total_slots())},
            {"expert_cache_experts", std::to_string(total)},
            {"expert_cache_mib", std::to_string((cache_->total_slots() * expert_bytes_) >> 20)},
            {"expert_cache_adapt_every", std::to_string(opt_.adapt.every_passes)},
            {"cpu_workers", std::to_string(cpu_->workers())},
            {"gpu_miss_share", share_auto_ ? std::string("auto") : fmt(gpu_miss_share_)},
            {"experts_pinned", pinned_all_ ? "1" : "0"}};
}

std::string HybridMoe::summary() const {
    if (!cache_) return "";
    const double rate = cache_->lookups() ? 100.0 * cache_->hits() / cache_->lookups() : 0.0;
    return fmt("expert cache: ", cache_->total_slots(), " slots of ", (int64_t)layers_.size() * n_experts_,
               " experts; hits ", cache_->hits(), " of ", cache_->lookups(), " look-ups (", (int)(rate * 10) / 10.0,
               "%); moves ", cache_->moves_done(), " done, ", cache_->moves_in_flight(), " in flight; CPU ",
               cpu_->pairs_done(), " expert pairs in ", (int)(cpu_->seconds() * 1000), " ms on ", cpu_->workers(),
               " workers; CPU read ", counters_.cpu_bytes >> 20, " MiB of experts (",
               (int)(cpu_->seconds() > 0 ? counters_.cpu_bytes / cpu_->seconds() / 1e9 * 10 : 0) / 10.0,
               " GB/s); GPU waited ",
               (int)(counters_.gpu_wait_ms + (words_ ? (double)words_->wait_ns / 1e6 : 0.0)), " ms for the CPU; ", counters_.pcie_bytes >> 20,
               " MiB of missed experts over PCIe for prompt chunks in ", (int)counters_.pcie_ms, " ms of copies (",
               (int)(counters_.pcie_ms > 0 ? counters_.pcie_bytes / counters_.pcie_ms / 1e5 : 0) / 10.0,
               " GB/s); experts pinned in ", (int)(pin_s_ * 1000), " ms (",
               (int)(pin_s_ > 0 ? pinned_bytes_ / pin_s_ / 1e8 : 0) / 10.0, " GB/s); decode misses read by the GPU: share ",
               (int)((share_auto_ ? auto_share() : gpu_miss_share_) * 100 + 0.5) / 100.0,
               share_auto_ ? " (auto)" : "", "; join ",
               device_on_ ? "device" : async_join_ ? "async" : "host", "; ", prefetch_summary());
}

}  // namespace strata::cuda
