// The GPU backend's settings from the command line: the activation mode and the hybrid expert path (an expert cache
// on the GPU, the CPU computing the misses). Plain C++, so the CLI can fill it in a build without CUDA.
#pragma once
#include <cstdint>
#include <string>

#include "experts/expert_cache.h"

namespace strata {

struct GpuOptions {
    bool f32_activations = false;      // --f32-activations
    std::string expert_cache;          // --expert-cache auto|N-slots|N-GiB; empty = every expert uploaded, no cache
    int64_t vram_reserve_mib = 1536;   // --vram-reserve-mib: kept free for activations and the desktop
    // Kept free besides it: what the engine allocates after the cache is sized at model load, i.e. the session's
    // state for the context (KV caches, indexer keys), the MTP head's weights and KV, and a prompt chunk's activations
    // (the CLI computes it).
    uint64_t context_reserve_bytes = 0;
    int64_t gpu_experts_max = -1;      // --gpu-experts-max: cap on the slots (−1 = none)
    int cpu_workers = 0;               // --cpu-workers: threads computing misses (0 = physical cores − 1)
    std::string routing_profile;       // --routing-profile F: initial fill
    std::string routing_profile_out;   // --routing-profile-out F: written at exit from the routing seen
    AdaptSettings adapt;               // --expert-adapt N sets adapt.every_passes (0 = frozen)
    // Calls of at least this many tokens (prompt chunks) compute their misses on the GPU, the missed experts copied
    // over PCIe (each once per call); shorter ones (decode, verify windows) send them to the CPU pool.
    int gpu_miss_min_tokens = 32;
    // Shorter calls: this share of their missed experts is computed on the GPU too (the first in id order), read
    // zero-copy from pinned host memory (decode calls joined on the device) or copied over PCIe first, the rest by
    // the CPU pool at the same time; 0 = all on the CPU. Where PCIe moves an expert faster than the CPU pool reads
    // one (the H200 host: ~50 vs ~20 GB/s), a share shortens the GPU's wait at the join. --gpu-miss-share auto|F;
    // STRATA_GPU_MISS_SHARE overrides it (A/B runs, hybrid_moe.cu). kMissShareAuto: the device join balances it
    // pass by pass (experts/miss_share.h); the host join then reads none zero-copy.
    static constexpr double kMissShareAuto = -1;
    double gpu_miss_share = kMissShareAuto;
};

}  // namespace strata
