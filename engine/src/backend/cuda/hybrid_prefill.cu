// HybridMoe's prompt-chunk path: a call of many tokens computes its missed experts on the GPU, copying each missed
// expert once per call over PCIe from its layer's pinned piece into a two-half staging arena, batch by batch, the
// copies of one batch overlapping the kernels of the previous one; prompt-sized calls run the tiled kernels. The
// rest of the class is in hybrid_moe.cu. The copies run on their own stream (stage_stream_), not behind cache moves.
#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/hybrid_moe.h"

namespace strata::cuda {

namespace {
using Scratch = PoolScratch;
}  // namespace

void HybridMoe::harvest_copy_timings(bool wait) {
    for (size_t i = 0; i < copy_timings_.size();) {
        JoinTiming& t = copy_timings_[i];
        const cudaError_t st = wait ? cudaEventSynchronize(t.misses_in) : cudaEventQuery(t.misses_in);
        if (st == cudaErrorNotReady) { ++i; continue; }
        CUDA_CHECK(st);
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, t.hits_done, t.misses_in));
        counters_.pcie_ms += ms;
        free_copy_timings_.push_back(t);
        copy_timings_.erase(copy_timings_.begin() + i);
    }
}

void HybridMoe::misses_on_gpu(const Layer& L, const float* x, const std::vector<ExpertPair>& misses,
                              const std::vector<MissBatch>& batches, const int32_t* d_route, const int32_t* d_stage,
                              const int32_t* d_token, float* out) {
    const int H = (int)L.gate.ne[0], I = (int)L.gate.ne[1];
    if (!d_stage_gate_) {
        size_t g = 0, u = 0, d = 0;
        for (const Layer& other : layers_) {
            g = std::max(g, other.gate_bytes);
            u = std::max(u, other.up_bytes);
            d = std::max(d, other.down_bytes);
        }
        CUDA_CHECK(cudaMalloc(&d_stage_gate_, 2 * g * stage_slots_));
        CUDA_CHECK(cudaMalloc(&d_stage_up_, 2 * u * stage_slots_));
        CUDA_CHECK(cudaMalloc(&d_stage_down_, 2 * d * stage_slots_));
        for (int h = 0; h < 2; ++h) {
            CUDA_CHECK(cudaEventCreateWithFlags(&stage_ready_[h], cudaEventDisableTiming));
            CUDA_CHECK(cudaEventCreateWithFlags(&stage_free_[h], cudaEventDisableTiming));
            CUDA_CHECK(cudaEventRecord(stage_free_[h], stream_));
        }
    }
    // Each batch's copies run on the copy stream once the kernels that read its half two batches ago are done.
    for (const MissBatch& b : batches) {
        const int h = stage_half_;
        stage_half_ ^= 1;
        const size_t first = (size_t)h * stage_slots_;
        uint8_t* sg = d_stage_gate_ + first * L.gate_bytes;
        uint8_t* su = d_stage_up_ + first * L.up_bytes;
        uint8_t* sd = d_stage_down_ + first * L.down_bytes;
        CUDA_CHECK(cudaStreamWaitEvent(stage_stream_, stage_free_[h], 0));
        JoinTiming ct;   // copy-stream time of this batch's copies (the wait above is before its start)
        if (!free_copy_timings_.empty()) {
            ct = free_copy_timings_.back();
            free_copy_timings_.pop_back();
        } else {
            CUDA_CHECK(cudaEventCreate(&ct.hits_done));
            CUDA_CHECK(cudaEventCreate(&ct.misses_in));
        }
        CUDA_CHECK(cudaEventRecord(ct.hits_done, stage_stream_));
        // Consecutive expert ids sit next to each other in every matrix: one copy per run of them.
        int slots = 0, run_expert = -1, run_slot = 0, run_len = 0;
        for (size_t j = b.begin; j < b.end; ++j) {
            if (j > b.begin && misses[j].expert == misses[j - 1].expert) continue;
            if (run_len && misses[j].expert == run_expert + run_len) {
                ++run_len;
            } else {
                if (run_len) copy_experts_to(L, run_expert, run_len, sg, su, sd, run_slot, stage_stream_);
                run_expert = misses[j].expert;
                run_slot = slots;
                run_len = 1;
            }
            ++slots;
        }
        if (run_len) copy_experts_to(L, run_expert, run_len, sg, su, sd, run_slot, stage_stream_);
        CUDA_CHECK(cudaEventRecord(ct.misses_in, stage_stream_));
        copy_timings_.push_back(ct);
        CUDA_CHECK(cudaEventRecord(stage_ready_[h], stage_stream_));
        CUDA_CHECK(cudaStreamWaitEvent(stream_, stage_ready_[h], 0));
        counters_.pcie_bytes += (int64_t)slots * (int64_t)(L.gate_bytes + L.up_bytes + L.down_bytes);

        const size_t i = b.begin;
        const int cnt = (int)(b.end - b.begin);
        ExpertOrder tiles;   // the batch's tiles: staging slot, first pair from b.begin, count
        tiles.items = d_route ? reinterpret_cast<int4*>(const_cast<int32_t*>(d_route + b.item_word)) : nullptr;
        tiles.n_items = d_route ? const_cast<int32_t*>(d_route + b.count_word) : nullptr;
        tiles.max_items = b.n_items;
        const ExpertOrder* order = d_route ? &tiles : nullptr;
        Scratch xg(pool_, (size_t)cnt * H * 4), gate(pool_, (size_t)cnt * I * 4), up(pool_, (size_t)cnt * I * 4);
        gather_rows(stream_, x, d_token + i, cnt, H, xg.as<float>());
        auto args = [&](const Weight& e, const uint8_t* arena, int rows, int cols) {
            MatmulArgs m;
            m.type = e.type;
            m.w = arena;
            m.row_bytes = e.row_bytes;
            m.rows = rows;
            m.n = cols;
            m.mat_stride = (size_t)rows * e.row_bytes;
            m.ids = d_stage + i;
            m.act_div = 1;
            return m;
        };
        matmul_(args(L.gate, sg, I, H), xg.as<float>(), cnt, cnt, gate.as<float>(), order);
        matmul_(args(L.up, su, I, H), xg.as<float>(), cnt, cnt, up.as<float>(), order);
        swiglu(stream_, gate.as<float>(), up.as<float>(), (size_t)cnt * I, gate.as<float>());
        matmul_(args(L.down, sd, H, I), gate.as<float>(), cnt, cnt, out + i * H, order);
        CUDA_CHECK(cudaEventRecord(stage_free_[h], stream_));
    }
}

}  // namespace strata::cuda
