// A pool of device memory for activations and scratch: blocks carved out of cudaMalloc'd segments and merged back when
// released (common/block_arena.h), reused in stream order (all work runs on one stream). Only cudaMalloc, never
// managed memory.
#pragma once
#include <cstddef>

#include "common/block_arena.h"

namespace strata::cuda {

class DevicePool {
public:
    // min_segment: the smallest cudaMalloc (a captured graph's own scratch pool asks for small ones).
    explicit DevicePool(size_t min_segment = size_t(32) << 20);
    DevicePool(const DevicePool&) = delete;
    DevicePool& operator=(const DevicePool&) = delete;

    void* get(size_t bytes);       // at least `bytes`, 512-byte aligned; throws on out-of-memory
    void put(void* p);             // back to the pool; p must come from get()
    size_t held_bytes() const { return arena_.held_bytes(); }
    size_t live_bytes() const { return arena_.live_bytes(); }   // handed out and not yet put back
    size_t peak_bytes() const { return arena_.peak_bytes(); }   // the most live since reset_peak()
    void reset_peak() { arena_.reset_peak(); }

private:
    BlockArena arena_;
};

}  // namespace strata::cuda
