// CapturedGraph: pinned upload slots in a few cudaHostAlloc'd blocks, instantiate, refill and launch.
#include "backend/cuda/captured_graph.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "common/error.h"

namespace strata::cuda {

CapturedGraph::CapturedGraph(size_t upload_bytes) {
    CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    void* p = nullptr;
    const size_t bytes = std::max<size_t>(upload_bytes, 64);     // the caller's sum of 64-byte-rounded uploads
    CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
    blocks_.push_back({p, bytes});
}

CapturedGraph::~CapturedGraph() {
    // No throwing from a destructor: errors here are ignored.
    if (done_) {
        cudaEventSynchronize(done_);
        cudaEventDestroy(done_);
    }
    if (exec_) cudaGraphExecDestroy(exec_);
    for (auto& [p, n] : blocks_) cudaFreeHost(p);
}

void* CapturedGraph::take_slot(size_t bytes) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    if (block_used_ + rounded > blocks_.back().second) {
        // Allocating pinned memory is not stream work, so it may happen during a (relaxed) capture.
        void* p = nullptr;
        const size_t size = std::max<size_t>(rounded, 4096);
        CUDA_CHECK(cudaHostAlloc(&p, size, cudaHostAllocDefault));
        blocks_.push_back({p, size});
        block_used_ = 0;
    }
    void* slot = static_cast<uint8_t*>(blocks_.back().first) + block_used_;
    block_used_ += rounded;
    slots_.push_back({slot, bytes});
    return slot;
}

void CapturedGraph::instantiate(cudaGraph_t graph) {
    STRATA_ASSERT(!exec_);
    CUDA_CHECK(cudaGraphInstantiate(&exec_, graph, 0));
}

void CapturedGraph::launch(cudaStream_t s) {
    STRATA_ASSERT(exec_);
    CUDA_CHECK(cudaGraphLaunch(exec_, s));
    CUDA_CHECK(cudaEventRecord(done_, s));
}

void CapturedGraph::launch(cudaStream_t s, const std::vector<std::pair<const void*, size_t>>& data) {
    STRATA_CHECK(repeatable_, "cuda graph: launched again although it cannot repeat its uploads");
    STRATA_CHECK(data.size() == slots_.size(), "cuda graph: ", data.size(), " uploads for a graph of ", slots_.size());
    CUDA_CHECK(cudaEventSynchronize(done_));     // the last launch has read the slots
    for (size_t i = 0; i < data.size(); ++i) {
        STRATA_CHECK(data[i].second == slots_[i].second, "cuda graph: upload ", i, " of ", data[i].second,
                     " bytes for a slot of ", slots_[i].second);
        std::memcpy(slots_[i].first, data[i].first, data[i].second);
    }
    launch(s);
}

}  // namespace strata::cuda
