// PinnedStaging: two cudaHostAlloc'd halves and one event each.
#include "backend/cuda/pinned_staging.h"

#include "backend/cuda/cuda_check.h"

namespace strata::cuda {

PinnedStaging::PinnedStaging(size_t half_bytes) : half_(half_bytes) {
    for (int h = 0; h < 2; ++h) {
        CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&base_[h]), half_, cudaHostAllocDefault));
        CUDA_CHECK(cudaEventCreateWithFlags(&done_[h], cudaEventDisableTiming));
    }
}

PinnedStaging::~PinnedStaging() {
    for (int h = 0; h < 2; ++h) {     // no throwing from a destructor
        if (done_[h]) {
            cudaEventSynchronize(done_[h]);
            cudaEventDestroy(done_[h]);
        }
        if (base_[h]) cudaFreeHost(base_[h]);
    }
}

void* PinnedStaging::take(size_t bytes) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    if (used_ + rounded > half_) return nullptr;
    void* p = base_[cur_] + used_;
    used_ += rounded;
    return p;
}

void PinnedStaging::record(cudaStream_t s) { CUDA_CHECK(cudaEventRecord(done_[cur_], s)); }

void PinnedStaging::flip_and_wait() {
    cur_ ^= 1;
    CUDA_CHECK(cudaEventSynchronize(done_[cur_]));     // a never-recorded event counts as complete
    used_ = 0;
}

}  // namespace strata::cuda
