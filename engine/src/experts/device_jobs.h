// The jobs of the hybrid path's device-driven join (backend/cuda/hybrid_device.h) as the CPU sees them: the layout
// of a ring slot in mapped host memory (written by the GPU's plan kernel, the CPU's sums written back into it) and
// the CPU's share of a job. Plain C++ that nvcc also compiles for the device, so the CPU tests check the layout and
// the arithmetic the dispatcher runs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/moe_cpu.h"
#include "experts/pair_places.h"

namespace strata {

constexpr int kDevicePairs = kPlacePairsMax;   // pairs of one device-joined call at most (T·k ≤ 64)
constexpr int kDeviceTokens = 8;               // tokens of one call at most (kGraphMaxTokens)
constexpr int kRingSlots = 32;                 // jobs posted and not yet consumed by the dispatcher, at most

// The head of a ring slot (seq written last by the GPU). x [T, H] follows at kJobHeaderBytes, the CPU's weighted
// sums out [T, H] at kJobHeaderBytes + kDeviceTokens·H·4.
struct DeviceJob {
    uint32_t seq;
    int32_t layer, T, k, n_cpu, pad[3];
    int32_t ids[kDevicePairs];
    float weights[kDevicePairs];
    int32_t place[kDevicePairs];    // PairPlace
};
constexpr size_t kJobHeaderBytes = 1024;
static_assert(sizeof(DeviceJob) <= kJobHeaderBytes, "DeviceJob fits its header");

STRATA_HOST_DEVICE inline size_t job_slot_bytes(int H) {
    return (kJobHeaderBytes + (size_t)2 * kDeviceTokens * H * sizeof(float) + 255) / 256 * 256;
}
STRATA_HOST_DEVICE inline float* job_x(uint8_t* slot) { return reinterpret_cast<float*>(slot + kJobHeaderBytes); }
STRATA_HOST_DEVICE inline float* job_out(uint8_t* slot, int H) { return job_x(slot) + (size_t)kDeviceTokens * H; }

// The CPU's pairs of a job: (token p / k, expert) for every pair placed on the CPU, in pair order; rows [pairs, H] is
// where the caller computes their outputs (CpuExpertPool::compute). Kept from job to job (no allocation per layer).
struct CpuShare {
    std::vector<ExpertPair> pairs;
    std::vector<int> pair_of;   // the job's pair index of each
    std::vector<float> rows;
    int distinct = 0;           // distinct experts among them (each one's weights read once)
};

inline void collect_cpu_share(const DeviceJob& job, int H, CpuShare& share) {
    share.pairs.clear();
    share.pair_of.clear();
    share.distinct = 0;
    for (int p = 0; p < job.T * job.k; ++p) {
        if (job.place[p] != kPairCpu) continue;
        bool seen = false;
        for (const ExpertPair& q : share.pairs) seen = seen || q.expert == job.ids[p];
        share.distinct += !seen;
        share.pairs.push_back(ExpertPair{p / job.k, job.ids[p]});
        share.pair_of.push_back(p);
    }
    share.rows.resize(share.pairs.size() * (size_t)H);
}

// out [T, H] = per token, the sum of w_p · rows of its CPU pairs in pair order (0 where it has none): what the GPU's
// join adds to its own weighted sum of the other pairs.
inline void sum_cpu_share(const DeviceJob& job, const CpuShare& share, int H, float* out) {
    std::memset(out, 0, (size_t)job.T * H * sizeof(float));
    for (size_t i = 0; i < share.pairs.size(); ++i) {
        const float w = job.weights[share.pair_of[i]];
        float* o = out + (size_t)share.pairs[i].token * H;
        const float* r = share.rows.data() + i * (size_t)H;
        for (int c = 0; c < H; ++c) o[c] += w * r[c];
    }
}

}  // namespace strata
