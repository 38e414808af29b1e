// Page-locked staging for small host→device copies that return at once: the host values are copied into one of
// two pinned halves and the device copy reads them later in stream order. A half is written again only after an
// event recorded behind the copies that read it has completed.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace strata::cuda {

class PinnedStaging {
public:
    explicit PinnedStaging(size_t half_bytes);
    ~PinnedStaging();
    PinnedStaging(const PinnedStaging&) = delete;
    PinnedStaging& operator=(const PinnedStaging&) = delete;

    size_t half_bytes() const { return half_; }
    // Room for `bytes` in the current half, or null when it has none left.
    void* take(size_t bytes);
    // Marks the end of the current half's copies (an event on s, after the work queued so far).
    void record(cudaStream_t s);
    // Moves to the other half, first waiting until the copies that last read it have run.
    void flip_and_wait();

private:
    uint8_t* base_[2] = {nullptr, nullptr};
    cudaEvent_t done_[2] = {nullptr, nullptr};
    size_t half_ = 0, used_ = 0;
    int cur_ = 0;
};

}  // namespace strata::cuda
