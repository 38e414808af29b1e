// A caching pool of device memory for activations and scratch: released blocks are kept by size and handed out
// again (all work runs on one stream, so stream order makes reuse safe). Only cudaMalloc, never managed memory.
#pragma once
#include <cstddef>
#include <map>
#include <unordered_map>

namespace strata::cuda {

class DevicePool {
public:
    DevicePool() = default;
    ~DevicePool();
    DevicePool(const DevicePool&) = delete;
    DevicePool& operator=(const DevicePool&) = delete;

    void* get(size_t bytes);       // at least `bytes`, 256-byte aligned; throws on out-of-memory
    void put(void* p);             // back to the pool; p must come from get()
    size_t held_bytes() const { return held_; }
    size_t live_bytes() const { return live_bytes_; }   // handed out and not yet put back
    size_t peak_bytes() const { return peak_; }         // the most live since reset_peak()
    void reset_peak() { peak_ = live_bytes_; }

private:
    void drop_free();              // cudaFree every cached block (before retrying a failed cudaMalloc)
    void note_live(size_t bytes);
    std::multimap<size_t, void*> free_;         // size → block
    std::unordered_map<void*, size_t> live_;    // block → size
    size_t held_ = 0;
    size_t live_bytes_ = 0, peak_ = 0;
};

}  // namespace strata::cuda
