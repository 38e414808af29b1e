// What a backend offers GraphBackend (graph_backend.h) to run a recorded run of its ops as one replayable graph:
// capture the ops once, then launch the same graph again with new upload data. A CUDA backend implements it with
// stream capture; the CPU backend does not (Backend::graph_capture() is null).
#pragma once
#include <cstddef>
#include <vector>

namespace strata {

class GraphCapture {
public:
    // An executable graph, owned by the backend until destroy().
    using Exec = void*;
    // Host bytes of one upload (Backend::to_device) of a graph, in issue order.
    struct Upload {
        const void* data;
        size_t bytes;
    };

    virtual ~GraphCapture() = default;
    // Starts capturing the ops issued next. While capturing: each to_device reads its data from a slot the graph owns
    // (upload_bytes in all, each upload's bytes rounded up to 64), so that a launch can refill it; scratch memory the ops take is the graph's own
    // (never handed to anyone else, so the graph may run again at any time).
    virtual void capture_begin(size_t upload_bytes) = 0;
    // Ends the capture and runs the graph once. Returns null when the captured work cannot be repeated as it stands
    // (an op uploaded host data other than through to_device, say): it has run, and nothing is kept.
    virtual Exec capture_end() = 0;
    // Runs exec again, its uploads refilled with `uploads` (the same count and sizes as when it was captured).
    // False: this backend keeps no executable graphs (a test double) and the caller issues the ops again.
    virtual bool launch(Exec exec, const std::vector<Upload>& uploads) = 0;
    virtual void destroy(Exec exec) = 0;
    // Whether moe_experts of T tokens × k experts (and the shared_expert after it) reads routing on the host
    // mid-pass (an expert cache whose misses the host hands out): they then run outside graphs.
    virtual bool moe_on_host(int T, int k) const = 0;
};

}  // namespace strata
