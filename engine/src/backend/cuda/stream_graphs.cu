// StreamGraphs: relaxed-mode stream capture (the pool may cudaMalloc mid-pass), cudaGraphExecUpdate or instantiate.
#include "backend/cuda/stream_graphs.h"

#include "backend/cuda/cuda_check.h"

namespace strata::cuda {

StreamGraphs::~StreamGraphs() {
    if (capturing_) {     // a pass abandoned by an exception: drop its capture (no throwing from a destructor)
        cudaGraph_t g = nullptr;
        if (cudaStreamEndCapture(stream_, &g) == cudaSuccess && g) cudaGraphDestroy(g);
    }
    clear();
}

void StreamGraphs::clear() {
    for (auto& [n, exec] : execs_) cudaGraphExecDestroy(exec);
    execs_.clear();
}

void StreamGraphs::begin() {
    if (capturing_) return;
    staging_.flip_and_wait();
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
    capturing_ = true;
}

void StreamGraphs::end() {
    if (!capturing_) return;
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    size_t nodes = 0;
    CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
    auto it = execs_.find(nodes);
    if (it != execs_.end()) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(it->second, graph, &info) == cudaSuccess) {
            ++updates;
        } else {
            cudaGetLastError();      // clear the update's error; instantiate afresh
            CUDA_CHECK(cudaGraphExecDestroy(it->second));
            execs_.erase(it);
            it = execs_.end();
        }
    }
    if (it == execs_.end()) {
        if (execs_.size() >= 16) clear();     // shapes: trunk and MTP head at T = 1 … 8
        cudaGraphExec_t exec = nullptr;
        CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        it = execs_.emplace(nodes, exec).first;
        ++instantiations;
    }
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
    staging_.record(stream_);
    ++launches;
}

}  // namespace strata::cuda
