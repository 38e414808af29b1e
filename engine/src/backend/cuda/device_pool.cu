#include "backend/cuda/device_pool.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"

namespace strata::cuda {

namespace {
void* device_alloc(size_t bytes) {
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();                        // clear the error state of this thread; the arena gives back
        return nullptr;                            // its free segments and tries once more
    }
    CUDA_CHECK(err);
    return p;
}

void device_free(void* p) {
    // Segments go back after the stream's work that may still read them (the arena gives back only unused ones).
    cudaDeviceSynchronize();
    cudaFree(p);                                   // no throwing: also runs from destructors
}
}  // namespace

DevicePool::DevicePool(size_t min_segment)
    : arena_(device_alloc, device_free, min_segment, std::min<size_t>(min_segment, size_t(2) << 20)) {}

void* DevicePool::get(size_t bytes) {
    void* p = arena_.get(bytes);
    if (!p)
        fail("cuda: cannot allocate ", bytes, " bytes of device memory (out of memory); the pool holds ",
             arena_.held_bytes(), " bytes, ", arena_.live_bytes(), " of them in use");
    return p;
}

void DevicePool::put(void* p) {
    if (p) arena_.put(p);
}

}  // namespace strata::cuda
