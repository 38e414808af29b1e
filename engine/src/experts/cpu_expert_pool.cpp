// CpuExpertPool: the hybrid path's CPU workers; the expert arithmetic is compute_experts_cpu (backend/cpu/moe_cpu).
#include "experts/cpu_expert_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "common/error.h"
#include "quant/quant.h"

namespace strata {

CpuExpertPool::CpuExpertPool(int n_workers, bool f32_activations) : pool_(n_workers, false), f32_(f32_activations) {}

void CpuExpertPool::copy(void* dst, const void* src, size_t bytes) {
    const int64_t pieces = std::max<int64_t>(1, std::min<int64_t>(pool_.size() * 4, (int64_t)(bytes >> 20)));
    pool_.parallel_for(pieces, [&](int64_t p0, int64_t p1) {
        const size_t b0 = bytes * p0 / pieces, b1 = bytes * p1 / pieces;
        std::memcpy(static_cast<uint8_t*>(dst) + b0, static_cast<const uint8_t*>(src) + b0, b1 - b0);
    });
}

void CpuExpertPool::warm(const Weight& gate, const Weight& up, const Weight& down, const std::vector<int>& experts) {
    const Weight* mats[3] = {&gate, &up, &down};
    const int64_t n = (int64_t)experts.size() * 3;
    std::atomic<uint64_t> sum{0};
    pool_.parallel_for(n, [&](int64_t i0, int64_t i1) {
        uint64_t acc = 0;
        for (int64_t i = i0; i < i1; ++i) {
            const Weight& m = *mats[i % 3];
            const size_t bytes = m.row_bytes * (size_t)m.ne[1];
            const uint8_t* p = static_cast<const uint8_t*>(m.data) + bytes * (size_t)experts[(size_t)(i / 3)];
            for (size_t b = 0; b + 8 <= bytes; b += 64) {
                uint64_t v;
                std::memcpy(&v, p + b, 8);
                acc += v;
            }
        }
        sum.fetch_add(acc, std::memory_order_relaxed);
    });
    warm_sink_ += sum.load();
}

void CpuExpertPool::compute(const Weight& gate, const Weight& up, const Weight& down, const float* x,
                            const std::vector<ExpertPair>& pairs, float* out) {
    if (pairs.empty()) return;
    const auto t0 = std::chrono::steady_clock::now();
    compute_experts_cpu(pool_, f32_, gate, up, down, x, pairs, out, scratch_);
    pairs_done_ += (int64_t)pairs.size();
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace strata
