// DevicePool: sizes are rounded to one of 8 steps per power of two so that blocks of similar sizes are shared.
#include "backend/cuda/device_pool.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"

namespace strata::cuda {

namespace {
size_t round_size(size_t bytes) {
    if (bytes <= 4096) return 4096;
    size_t p = 4096;
    while (p * 2 < bytes) p *= 2;                 // p < bytes <= 2p
    const size_t step = p / 8;
    return (bytes + step - 1) / step * step;
}
}  // namespace

DevicePool::~DevicePool() {
    for (auto& [size, p] : free_) cudaFree(p);     // no throwing from a destructor
    for (auto& [p, size] : live_) cudaFree(p);
}

void* DevicePool::get(size_t bytes) {
    const size_t size = round_size(bytes);
    auto it = free_.lower_bound(size);
    if (it != free_.end() && it->first <= size + size / 4) {
        void* p = it->second;
        live_[p] = it->first;
        note_live(it->first);
        free_.erase(it);
        return p;
    }
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();                        // clear the sticky-free error state of this thread
        drop_free();
        err = cudaMalloc(&p, size);
    }
    if (err != cudaSuccess)
        fail("cuda: cannot allocate ", size, " bytes of device memory (", cudaGetErrorString(err), "); the pool holds ",
             held_, " bytes");
    live_[p] = size;
    held_ += size;
    note_live(size);
    return p;
}

void DevicePool::note_live(size_t bytes) {
    live_bytes_ += bytes;
    peak_ = std::max(peak_, live_bytes_);
}

void DevicePool::put(void* p) {
    if (!p) return;
    auto it = live_.find(p);
    STRATA_CHECK(it != live_.end(), "cuda: release of a pointer the pool did not hand out");
    free_.emplace(it->second, p);
    live_bytes_ -= it->second;
    live_.erase(it);
}

void DevicePool::drop_free() {
    CUDA_CHECK(cudaDeviceSynchronize());
    for (auto& [size, p] : free_) {
        CUDA_CHECK(cudaFree(p));
        held_ -= size;
    }
    free_.clear();
}

}  // namespace strata::cuda
