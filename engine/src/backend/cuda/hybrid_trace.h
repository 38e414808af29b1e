// STRATA_HYBRID_TRACE=1: where a hybrid decode pass's time goes, layer by layer, on one clock. The device join's
// kernels stamp %globaltimer into a device table (plan, stage and join events a layer); the dispatcher stamps the
// CPU's side (job seen, compute start and end, done published) with the host clock, moved onto the GPU's by an offset
// measured at start. Every kLogPasses passes one log line gives the mean µs a layer of each interval.
#pragma once
#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

namespace strata::cuda {

// Columns of a layer's row in the device table (written by kernels/hybrid_device.cu).
enum GpuTraceEvent : int {
    kTrPlanStart, kTrPlanPlaced, kTrPlanEnd, kTrStageStart, kTrStageEnd, kTrJoinStart, kTrJoinSeen, kTrJoinEnd, kTrGpuEvents
};
// The dispatcher's stamps of a layer's job.
enum HostTraceEvent : int { kTrSeen, kTrComputeStart, kTrComputeEnd, kTrDone, kTrHostEvents };

class HybridTrace {
public:
    // layers: rows of the table. Allocates it, measures the clock offset (~2 ms of a beacon kernel on s).
    HybridTrace(int layers, cudaStream_t s);
    ~HybridTrace();
    HybridTrace(const HybridTrace&) = delete;
    HybridTrace& operator=(const HybridTrace&) = delete;

    // [layers + 1][kTrGpuEvents] ns, 0 = not stamped; row `layers` holds the pass's own events (kPassEvent…).
    unsigned long long* device_table() const { return d_table_; }
    enum PassEvent : int { kPassEmbed };
    // A one-thread kernel on s stamps a pass event (captured into the pass's graph like any op).
    void stamp_on_stream(cudaStream_t s, int event);
    void host_stamp(int layer, int event);   // the dispatcher thread, during a pass
    // At a pass boundary, the stream synchronised and every job taken: adds this pass to the sums, clears both
    // tables (stream-ordered on s), logs every kLogPasses passes.
    void end_pass(cudaStream_t s);
    // The host's pass-level events (CudaBackend and HybridMoe::between_passes), kept for the pass's end_pass.
    enum Mark : int { kMarkBoundaryStart, kMarkBoundaryEnd, kMarkLaunched, kMarkLogitsOnHost, kMarks };
    void mark(int which);
    // The host's time in HybridMoe::between_passes (the GPU has nothing queued meanwhile).
    void add_boundary_ns(double ns) { boundary_ns_ += ns; }

    static constexpr int kLogPasses = 64;

private:
    void log_means();
    void calibrate(cudaStream_t s, unsigned long long run_ns);
    unsigned long long* beacon_ = nullptr;          // mapped word the beacon kernel writes
    long long marks_[kMarks] = {};
    int layers_;
    long long offset_ns_ = 0;                       // host realtime − GPU globaltimer (+ ~1 µs of read latency)
    unsigned long long* d_table_ = nullptr;
    std::vector<unsigned long long> gpu_;           // the last pass's table, copied back
    std::vector<long long> host_;                   // [layers][kTrHostEvents], GPU-clock ns, 0 = not stamped
    // Sums over the passes since the last log line, in ns, and how many layers each sum has.
    enum Interval : int {
        kGpuBefore, kPlan, kPlanFence, kToStage, kStage, kDecode, kJoinWait, kJoinRest, kPublish, kRecord, kCompute,
        kSum, kDoneToJoin, kRoundTrip, kLaunchCall, kLaunchToPlan, kLaunchToEmbed, kEmbedToPlan, kJoinToLogits, kLogitsToBoundary, kIntervals
    };
    double sum_[kIntervals] = {};
    int64_t count_[kIntervals] = {};
    int passes_ = 0;
    int64_t late_ = 0, cpu_layers_ = 0;
    double pass_ns_ = 0;   // first plan to last join of each pass
    double gap_ns_ = 0;    // last join of a pass to the first plan of the next (GPU clock), summed over gap_n_ gaps
    int gap_n_ = 0;
    long long last_join_ = 0;   // the last pass's
    double boundary_ns_ = 0;
};

}  // namespace strata::cuda
