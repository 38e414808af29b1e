// One captured run of a backend's ops (GraphCapture, backend/graph_capture.h): the executable graph, the pinned
// slots its uploads read (refilled before each launch), and the device scratch its ops took, which belongs to this
// graph alone so that it can run again at any time. Captured from one stream, so its nodes run one after another.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/device_pool.h"

namespace strata::cuda {

class CapturedGraph {
public:
    explicit CapturedGraph(size_t upload_bytes);     // pinned room for the uploads (more is added if needed)
    ~CapturedGraph();                                // waits for its last launch
    CapturedGraph(const CapturedGraph&) = delete;
    CapturedGraph& operator=(const CapturedGraph&) = delete;

    DevicePool& scratch() { return scratch_; }
    // Pinned room for one upload of `bytes`, recorded as the graph's next upload slot.
    void* take_slot(size_t bytes);
    size_t slot_count() const { return slots_.size(); }
    // An upload that a launch cannot refill (host data outside to_device): the graph runs once only.
    void mark_unrepeatable() { repeatable_ = false; }
    bool repeatable() const { return repeatable_; }

    // Turns the stream's finished capture into the executable graph.
    void instantiate(cudaGraph_t graph);
    // Waits until the last launch has read the slots, copies data[i] into slot i, launches on s.
    void launch(cudaStream_t s, const std::vector<std::pair<const void*, size_t>>& data);
    void launch(cudaStream_t s);                     // as captured (the first run)

private:
    cudaGraphExec_t exec_ = nullptr;
    cudaEvent_t done_ = nullptr;
    DevicePool scratch_{size_t(2) << 20};   // small segments: a pass's scratch is small
    std::vector<std::pair<void*, size_t>> blocks_;   // cudaHostAlloc'd (base, size)
    size_t block_used_ = 0;
    std::vector<std::pair<void*, size_t>> slots_;    // uploads in issue order
    bool repeatable_ = true;
};

}  // namespace strata::cuda
