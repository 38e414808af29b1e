// Per-op GPU time of the CUDA backend, on with STRATA_CUDA_PROFILE=1: CUDA events around each op, read back only after
// the stream has been synchronised anyway (to_host), and per decode pass the host's enqueue time against the GPU's busy
// time. Two tables go to stderr when the backend is destroyed: the ops of decode passes, and the ops outside them
// (prompt chunks, state copies), so a prompt's time can be split by op too. Costs one branch per op when off.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <cuda_runtime.h>

namespace strata::cuda {

class GpuOpProfile {
public:
    explicit GpuOpProfile(cudaStream_t stream);
    ~GpuOpProfile();   // prints the table (call print() first where the stream may be gone)
    GpuOpProfile(const GpuOpProfile&) = delete;
    GpuOpProfile& operator=(const GpuOpProfile&) = delete;
    bool on() const { return on_; }

    // An op's span on the stream and on the host clock. Nested ops: the time between an inner op's events counts for
    // the inner op, the rest of the outer op's span for the outer one (its own kernels, or the gaps around a fallback's
    // primitive ops). A span counts from its start event to its end event, so it includes the launch latency of the
    // op's first kernel when the GPU was idle.
    void open(const char* op, const char* detail);
    void close();

    // A pass runs from pass_begin (Backend::begin_graph, decode-sized passes) to the first to_host after it, which
    // calls pass_host_done before its wait and synced after it.
    void pass_begin();
    void pass_host_done();
    void synced();     // the stream is idle: read every recorded event

    void print();      // once; synchronises the stream

private:
    using Clock = std::chrono::steady_clock;
    struct Open {            // an op being issued; its current segment began at (start, t0)
        std::string name;
        cudaEvent_t start;
        Clock::time_point t0;
    };
    struct Span {            // one segment of an op
        std::string name;
        cudaEvent_t start, end;
        double host_us;
        bool in_pass;        // issued inside a decode pass (the table); others are summed in one line
        bool last;           // the op's last segment (counts the call)
    };
    struct Entry {
        uint64_t calls = 0;
        double gpu_ms = 0, host_ms = 0;
    };
    struct PassTotals {
        uint64_t passes = 0;
        double enqueue_ms = 0, wall_ms = 0, span_ms = 0, busy_ms = 0, op_host_ms = 0;
    };

    cudaEvent_t event();
    void end_segment(Open& o, bool last);
    void resolve();
    static void print_table(const char* title, const std::map<std::string, Entry>& entries);

    cudaStream_t stream_;
    bool on_ = false, printed_ = false;
    std::vector<cudaEvent_t> free_;
    std::vector<Open> open_;
    std::vector<Span> pending_;
    std::map<std::string, Entry> entries_;           // ops of decode passes
    std::map<std::string, Entry> outside_entries_;   // ops outside them (prompt chunks, state copies)
    // The pass in flight: its start (event, clock), its end event once the host is done, its ops' GPU and host time.
    bool in_pass_ = false, pass_enqueued_ = false;
    cudaEvent_t pass_start_ = nullptr, pass_end_ = nullptr;
    Clock::time_point pass_t0_;
    double pass_enqueue_ms_ = 0, pass_busy_ms_ = 0, pass_op_host_ms_ = 0;
    size_t pass_first_span_ = 0;   // index in pending_ of the pass's first op
    PassTotals totals_;
};

}  // namespace strata::cuda
