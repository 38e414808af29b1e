// HybridTrace (hybrid_trace.h): the clock offset, the per-pass sums and the log line.
#include "backend/cuda/hybrid_trace.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "common/error.h"
#include "common/log.h"

namespace strata::cuda {

namespace {

long long realtime_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// Writes %globaltimer to mapped host memory again and again for run_ns, so the host can read both clocks together.
__global__ void clock_beacon_kernel(volatile unsigned long long* out, unsigned long long run_ns) {
    unsigned long long start, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        *out = t;
        __threadfence_system();
    } while (t - start < run_ns);
}

__global__ void stamp_kernel(unsigned long long* slot) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    *slot = t;
}

}  // namespace

HybridTrace::HybridTrace(int layers, cudaStream_t s)
    : layers_(layers), gpu_((size_t)(layers + 1) * kTrGpuEvents), host_((size_t)layers * kTrHostEvents) {
    CUDA_CHECK(cudaMalloc(&d_table_, gpu_.size() * sizeof(unsigned long long)));
    CUDA_CHECK(cudaMemsetAsync(d_table_, 0, gpu_.size() * sizeof(unsigned long long), s));
    void* p = nullptr;
    CUDA_CHECK(cudaHostAlloc(&p, 64, cudaHostAllocMapped));
    beacon_ = static_cast<unsigned long long*>(p);
    calibrate(s, 2'000'000ull);
    log_info("experts", fmt("hybrid trace on: every ", kLogPasses, " passes the mean µs a layer of each step"));
}

// The offset: the smallest (host time after reading a beacon value − that value); too large by the time the value
// took to reach the host (~1 µs over PCIe), so host stamps land that much early on the GPU's clock. The two clocks
// drift apart by µs a second: measured again before each log window.
void HybridTrace::calibrate(cudaStream_t s, unsigned long long run_ns) {
    volatile unsigned long long* beacon = beacon_;
    *beacon = 0;
    void* d = nullptr;
    CUDA_CHECK(cudaHostGetDevicePointer(&d, beacon_, 0));
    clock_beacon_kernel<<<1, 1, 0, s>>>(static_cast<unsigned long long*>(d), run_ns);
    CUDA_CHECK_LAUNCH();
    long long best = 0;
    bool have = false;
    for (;;) {
        const unsigned long long g = *beacon;
        const long long h = realtime_ns();
        if (g != 0 && (!have || h - (long long)g < best)) {
            best = h - (long long)g;
            have = true;
        }
        const cudaError_t st = cudaStreamQuery(s);
        if (st == cudaSuccess) break;
        if (st != cudaErrorNotReady) CUDA_CHECK(st);
    }
    STRATA_CHECK(have, "hybrid trace: the clock beacon never reached the host");
    offset_ns_ = best;
}

HybridTrace::~HybridTrace() {
    if (d_table_) cudaFree(d_table_);
    if (beacon_) cudaFreeHost(beacon_);
}

void HybridTrace::stamp_on_stream(cudaStream_t s, int event) {
    stamp_kernel<<<1, 1, 0, s>>>(d_table_ + (size_t)layers_ * kTrGpuEvents + event);
    CUDA_CHECK_LAUNCH();
}

void HybridTrace::mark(int which) {
    const long long now = realtime_ns() - offset_ns_;
    // A pass is launched in pieces (GraphBackend's split): "launched" is the first piece's launch after the boundary.
    if (which == kMarkLaunched && marks_[kMarkLaunched] > marks_[kMarkBoundaryEnd]) return;
    marks_[which] = now;
}

void HybridTrace::host_stamp(int layer, int event) {
    if (layer < 0 || layer >= layers_) return;
    host_[(size_t)layer * kTrHostEvents + event] = realtime_ns() - offset_ns_;
}

void HybridTrace::end_pass(cudaStream_t s) {
    CUDA_CHECK(cudaMemcpy(gpu_.data(), d_table_, gpu_.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemsetAsync(d_table_, 0, gpu_.size() * sizeof(unsigned long long), s));
    auto add = [&](Interval i, long long a, long long b) {   // b − a when both were stamped
        if (a > 0 && b > 0) {
            sum_[i] += (double)(b - a);
            ++count_[i];
        }
    };
    long long first = 0, last = 0, prev_join_end = 0;
    bool any = false;
    for (int l = 0; l < layers_; ++l) {
        const unsigned long long* g = &gpu_[(size_t)l * kTrGpuEvents];
        const long long* h = &host_[(size_t)l * kTrHostEvents];
        const long long plan0 = (long long)g[kTrPlanStart], plan1 = (long long)g[kTrPlanEnd];
        if (plan0 == 0) continue;
        any = true;
        const bool staged = g[kTrStageStart] != 0;
        const long long join0 = (long long)g[kTrJoinStart], seen = (long long)g[kTrJoinSeen];
        const long long join1 = (long long)g[kTrJoinEnd];
        add(kGpuBefore, prev_join_end, plan0);
        add(kPlan, plan0, (long long)g[kTrPlanPlaced]);
        add(kPlanFence, (long long)g[kTrPlanPlaced], plan1);
        if (staged) {
            add(kToStage, plan1, (long long)g[kTrStageStart]);
            add(kStage, (long long)g[kTrStageStart], (long long)g[kTrStageEnd]);
        }
        add(kDecode, staged ? (long long)g[kTrStageEnd] : plan1, join0);
        add(kJoinWait, join0, seen);
        add(kJoinRest, seen, join1);
        add(kPublish, plan1, h[kTrSeen]);
        add(kRecord, h[kTrSeen], h[kTrComputeStart]);
        add(kCompute, h[kTrComputeStart], h[kTrComputeEnd]);
        add(kSum, h[kTrComputeEnd], h[kTrDone]);
        if (h[kTrComputeEnd] > 0) {
            ++cpu_layers_;
            // The CPU finished after the join began (on the offset clock): the join waited for it. (Every join
            // takes ≥ ~1 µs for its first PCIe read, so its own wait cannot tell.)
            if (h[kTrSeen] > 0 && h[kTrDone] > join0) {
                ++late_;
                add(kDoneToJoin, h[kTrDone], seen);
                // Without the clock offset: the GPU's plan-end-to-seen time less the host's seen-to-done time is
                // the two one-way trips (the job to the dispatcher, the done word to the join).
                sum_[kRoundTrip] += (double)((seen - plan1) - (h[kTrDone] - h[kTrSeen]));
                ++count_[kRoundTrip];
            }
        }
        if (first == 0) first = plan0;
        last = std::max(last, join1);
        prev_join_end = join1;
    }
    std::fill(host_.begin(), host_.end(), 0);
    if (!any) return;
    // This pass between the host's marks: the previous boundary's end, its graph launch, the logits on the host.
    auto add_mark = [&](Interval i, long long a, long long b) {
        if (a > 0 && b > 0 && b > a - 100000) add(i, a, b);
    };
    add_mark(kLaunchCall, marks_[kMarkBoundaryEnd], marks_[kMarkLaunched]);
    add_mark(kLaunchToPlan, marks_[kMarkLaunched], first);
    const long long embed = (long long)gpu_[(size_t)layers_ * kTrGpuEvents + kPassEmbed];
    add_mark(kLaunchToEmbed, marks_[kMarkLaunched], embed);
    add(kEmbedToPlan, embed, first);
    add_mark(kJoinToLogits, last, marks_[kMarkLogitsOnHost]);
    add_mark(kLogitsToBoundary, marks_[kMarkLogitsOnHost], marks_[kMarkBoundaryStart]);
    if (last > first) pass_ns_ += (double)(last - first);
    if (last_join_ > 0 && first > last_join_) {
        gap_ns_ += (double)(first - last_join_);
        ++gap_n_;
    }
    last_join_ = last;
    if (++passes_ >= kLogPasses) {
        log_means();
        calibrate(s, 300'000ull);
    }
}

void HybridTrace::log_means() {
    auto us = [&](Interval i) { return count_[i] ? sum_[i] / count_[i] / 1000.0 : 0.0; };
    auto r1 = [](double v) { return (double)(long long)(v * 10 + (v >= 0 ? 0.5 : -0.5)) / 10; };
    const double per_layer = 1.0 * count_[kPlan] / passes_;
    log_info("experts",
             fmt("trace, mean µs a layer over ", passes_, " passes (", r1(per_layer), " layers a pass, first plan to "
                 "last join ", r1(pass_ns_ / passes_ / 1e6 * 100) / 100, " ms; last join to the next pass's first plan ",
                 gap_n_ ? r1(gap_ns_ / gap_n_ / 1e3) : 0.0, " µs, of which the host's pass boundary ",
                 r1(boundary_ns_ / passes_ / 1e3), " µs; boundary end to the first graph piece launched ", r1(us(kLaunchCall)),
                 ", launched to first plan ", r1(us(kLaunchToPlan)), " (to the embedding ", r1(us(kLaunchToEmbed)),
                 ", embedding to first plan ", r1(us(kEmbedToPlan)), "), last join to logits on the host ",
                 r1(us(kJoinToLogits)), ", logits to the next boundary ", r1(us(kLogitsToBoundary)),
                 "): GPU before the plan ", r1(us(kGpuBefore)),
                 " | plan ", r1(us(kPlan)), " + fence and publish ", r1(us(kPlanFence)), " | to stage ", r1(us(kToStage)), " | stage ", r1(us(kStage)), " (",
                 count_[kStage], " staged) | decode ", r1(us(kDecode)), " | join wait ", r1(us(kJoinWait)),
                 " | join rest ", r1(us(kJoinRest)), " || CPU (", cpu_layers_, " layers, ", late_,
                 " where the CPU finished after the join began): plan end to job seen ", r1(us(kPublish)), " | seen to compute ", r1(us(kRecord)),
                 " | compute ", r1(us(kCompute)), " | sum and done ", r1(us(kSum)),
                 " | done to join seeing it (late joins, clock offset) ", r1(us(kDoneToJoin)),
                 " | job to host + done to GPU (late joins, no offset) ", r1(us(kRoundTrip))));
    std::fill(std::begin(sum_), std::end(sum_), 0.0);
    std::fill(std::begin(count_), std::end(count_), 0);
    passes_ = 0;
    late_ = cpu_layers_ = 0;
    pass_ns_ = gap_ns_ = boundary_ns_ = 0;
    gap_n_ = 0;
}

}  // namespace strata::cuda
