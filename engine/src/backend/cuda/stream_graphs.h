// One stream's passes run as CUDA graphs: begin() starts capturing the stream, end() turns the capture into an
// executable graph (updating in place the one of the same node count, the pass's shape, when it can; otherwise
// instantiating) and launches it. Host values a captured pass uploads live in staging(), one half per pass.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>

#include <cuda_runtime.h>

#include "backend/cuda/pinned_staging.h"

namespace strata::cuda {

class StreamGraphs {
public:
    explicit StreamGraphs(cudaStream_t s) : stream_(s) {}
    ~StreamGraphs();
    StreamGraphs(const StreamGraphs&) = delete;
    StreamGraphs& operator=(const StreamGraphs&) = delete;

    bool capturing() const { return capturing_; }
    PinnedStaging& staging() { return staging_; }
    void begin();       // waits until the pass before last has read its staging half, then captures
    void end();         // no-op when not capturing

    int64_t launches = 0, updates = 0, instantiations = 0;

private:
    void clear();
    cudaStream_t stream_;
    bool capturing_ = false;
    PinnedStaging staging_{4 << 20};
    std::map<size_t, cudaGraphExec_t> execs_;     // by node count
};

}  // namespace strata::cuda
