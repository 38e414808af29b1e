// HybridMoe's prompt-chunk path: a call of many tokens computes its missed experts on the GPU, copying them over
// PCIe from the pinned (or in-place locked) host experts into a two-half staging arena. The rest of the class is
// in hybrid_moe.cu.
#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/hybrid_moe.h"

namespace strata::cuda {

namespace {
using Scratch = PoolScratch;
}  // namespace

void HybridMoe::misses_on_gpu(const Layer& L, const float* x, const std::vector<ExpertPair>& misses,
                              const int32_t* d_stage, const int32_t* d_token, float* out) {
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
    // Batches of up to stage_slots_ distinct experts in two alternating halves of the arena: a batch's copies run
    // on the copy stream once the kernels that read its half two batches ago are done, so copies overlap compute.
    const size_t n = misses.size();
    for (size_t i = 0; i < n;) {
        const int h = stage_half_;
        stage_half_ ^= 1;
        const size_t first = (size_t)h * stage_slots_;
        uint8_t* sg = d_stage_gate_ + first * L.gate_bytes;
        uint8_t* su = d_stage_up_ + first * L.up_bytes;
        uint8_t* sd = d_stage_down_ + first * L.down_bytes;
        CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, stage_free_[h], 0));
        size_t j = i;
        int slots = 0, run_expert = -1, run_slot = 0, run_len = 0;
        for (int prev = -1; j < n; ++j) {
            if (misses[j].expert == prev) continue;
            if (slots == stage_slots_) break;
            // Consecutive expert ids sit next to each other in every matrix: one copy per run of them.
            if (run_len && misses[j].expert == run_expert + run_len) {
                ++run_len;
            } else {
                if (run_len) copy_experts_to(L, run_expert, run_len, sg, su, sd, run_slot, copy_stream_);
                run_expert = misses[j].expert;
                run_slot = slots;
                run_len = 1;
            }
            ++slots;
            prev = misses[j].expert;
        }
        if (run_len) copy_experts_to(L, run_expert, run_len, sg, su, sd, run_slot, copy_stream_);
        CUDA_CHECK(cudaEventRecord(stage_ready_[h], copy_stream_));
        CUDA_CHECK(cudaStreamWaitEvent(stream_, stage_ready_[h], 0));
        counters_.pcie_bytes += (int64_t)slots * (int64_t)(L.gate_bytes + L.up_bytes + L.down_bytes);
        const int cnt = (int)(j - i);
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
        matmul_(args(L.gate, sg, I, H), xg.as<float>(), cnt, cnt, gate.as<float>());
        matmul_(args(L.up, su, I, H), xg.as<float>(), cnt, cnt, up.as<float>());
        swiglu(stream_, gate.as<float>(), up.as<float>(), (size_t)cnt * I, gate.as<float>());
        matmul_(args(L.down, sd, H, I), gate.as<float>(), cnt, cnt, out + i * H);
        CUDA_CHECK(cudaEventRecord(stage_free_[h], stream_));
        i = j;
    }
}

}  // namespace strata::cuda
