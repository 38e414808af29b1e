// GpuOpProfile: event pairs per op, resolved after the stream's own synchronisations, and the table at exit.
#include "backend/cuda/gpu_op_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_check.h"

namespace strata::cuda {

namespace {
// Spans kept unread before one extra wait reads them (a long prompt without a to_host in between).
constexpr size_t kMaxPending = 1 << 16;
}

GpuOpProfile::GpuOpProfile(cudaStream_t stream) : stream_(stream) {
    const char* v = std::getenv("STRATA_CUDA_PROFILE");
    on_ = v && std::strcmp(v, "1") == 0;
}

GpuOpProfile::~GpuOpProfile() {
    print();
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

cudaEvent_t GpuOpProfile::event() {
    if (!free_.empty()) {
        cudaEvent_t e = free_.back();
        free_.pop_back();
        return e;
    }
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreate(&e));
    return e;
}

void GpuOpProfile::open(const char* op, const char* detail) {
    if (!on_) return;
    if (!open_.empty()) end_segment(open_.back(), false);   // the outer op's time up to here
    Open o;
    o.name = detail ? std::string(op) + " " + detail : std::string(op);
    o.start = event();
    CUDA_CHECK(cudaEventRecord(o.start, stream_));
    o.t0 = Clock::now();
    open_.push_back(std::move(o));
}

void GpuOpProfile::end_segment(Open& o, bool last) {
    cudaEvent_t end = event();
    CUDA_CHECK(cudaEventRecord(end, stream_));
    const double host_us = std::chrono::duration<double, std::micro>(Clock::now() - o.t0).count();
    pending_.push_back(Span{o.name, o.start, end, host_us, in_pass_ && !pass_enqueued_, last});
    o.start = nullptr;
    if (in_pass_ && !pass_enqueued_) pass_op_host_ms_ += host_us / 1000.0;
    if (pending_.size() >= kMaxPending) {
        CUDA_CHECK(cudaEventSynchronize(end));
        resolve();
    }
}

void GpuOpProfile::close() {
    if (!on_ || open_.empty()) return;
    end_segment(open_.back(), true);
    open_.pop_back();
    if (!open_.empty()) {     // the outer op's next segment
        Open& outer = open_.back();
        outer.start = event();
        CUDA_CHECK(cudaEventRecord(outer.start, stream_));
        outer.t0 = Clock::now();
    }
}

void GpuOpProfile::pass_begin() {
    if (!on_) return;
    if (in_pass_) free_.push_back(pass_start_);   // a pass that never reached to_host: not counted
    if (pass_end_) free_.push_back(pass_end_);
    pass_end_ = nullptr;
    in_pass_ = true;
    pass_enqueued_ = false;
    pass_start_ = event();
    CUDA_CHECK(cudaEventRecord(pass_start_, stream_));
    pass_t0_ = Clock::now();
    pass_busy_ms_ = pass_op_host_ms_ = 0;
    pass_first_span_ = pending_.size();
}

void GpuOpProfile::pass_host_done() {
    if (!on_ || !in_pass_ || pass_enqueued_) return;
    pass_enqueue_ms_ = std::chrono::duration<double, std::milli>(Clock::now() - pass_t0_).count();
    pass_end_ = event();
    CUDA_CHECK(cudaEventRecord(pass_end_, stream_));
    pass_enqueued_ = true;
}

void GpuOpProfile::resolve() {
    for (size_t i = 0; i < pending_.size(); ++i) {
        Span& s = pending_[i];
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, s.start, s.end));
        Entry& e = s.in_pass ? entries_[s.name] : outside_entries_[s.name];
        e.calls += s.last;
        e.gpu_ms += ms;
        e.host_ms += s.host_us / 1000.0;
        if (s.in_pass && in_pass_ && i >= pass_first_span_) pass_busy_ms_ += ms;
        free_.push_back(s.start);
        free_.push_back(s.end);
    }
    pending_.clear();
    pass_first_span_ = 0;
}

void GpuOpProfile::synced() {
    if (!on_) return;
    resolve();
    if (!in_pass_ || !pass_enqueued_) return;
    float span = 0;
    CUDA_CHECK(cudaEventElapsedTime(&span, pass_start_, pass_end_));
    ++totals_.passes;
    totals_.enqueue_ms += pass_enqueue_ms_;
    totals_.wall_ms += std::chrono::duration<double, std::milli>(Clock::now() - pass_t0_).count();
    totals_.span_ms += span;
    totals_.busy_ms += pass_busy_ms_;
    totals_.op_host_ms += pass_op_host_ms_;
    in_pass_ = pass_enqueued_ = false;
    free_.push_back(pass_start_);
    free_.push_back(pass_end_);
    pass_start_ = pass_end_ = nullptr;
}

// One table: an op a line, the largest GPU time first.
void GpuOpProfile::print_table(const char* title, const std::map<std::string, Entry>& entries) {
    std::vector<std::pair<std::string, Entry>> rows(entries.begin(), entries.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.gpu_ms > b.second.gpu_ms; });
    double total = 0, host = 0;
    uint64_t calls = 0;
    for (const auto& r : rows) {
        total += r.second.gpu_ms;
        host += r.second.host_ms;
        calls += r.second.calls;
    }
    std::fprintf(stderr, "cuda op profile (STRATA_CUDA_PROFILE=1), %s: %llu ops, %.3f ms on the GPU, %.3f ms host time "
                         "in ops\n",
                 title, (unsigned long long)calls, total, host);
    std::fprintf(stderr, "  %-30s %9s %11s %9s %6s %12s\n", "op", "calls", "gpu ms", "us/call", "share", "host us/call");
    for (const auto& [name, e] : rows)
        std::fprintf(stderr, "  %-30s %9llu %11.3f %9.2f %5.1f%% %12.2f\n", name.c_str(), (unsigned long long)e.calls,
                     e.gpu_ms, e.calls ? 1000.0 * e.gpu_ms / e.calls : 0.0, total > 0 ? 100.0 * e.gpu_ms / total : 0.0,
                     e.calls ? 1000.0 * e.host_ms / e.calls : 0.0);
}

void GpuOpProfile::print() {
    if (!on_ || printed_) return;
    printed_ = true;
    cudaStreamSynchronize(stream_);
    resolve();
    if (entries_.empty() && outside_entries_.empty()) return;
    if (!entries_.empty()) print_table("decode passes", entries_);
    const PassTotals& p = totals_;
    if (p.passes) {
        const double n = (double)p.passes;
        // The host waits at the pass's end while the GPU still has queued work: GPU-bound when that wait is a real
        // share of the pass; host-bound when the GPU finishes about when the host has issued the last op.
        const double wait = (p.wall_ms - p.enqueue_ms) / n;
        std::fprintf(stderr,
                     "  per decode pass (%llu passes): host enqueue %.3f ms (in ops %.3f), host wait %.3f ms, GPU busy "
                     "%.3f ms, GPU span %.3f ms, wall %.3f ms -> %s\n",
                     (unsigned long long)p.passes, p.enqueue_ms / n, p.op_host_ms / n, wait, p.busy_ms / n,
                     p.span_ms / n, p.wall_ms / n,
                     wait > 0.1 * p.wall_ms / n ? "GPU-bound (the host waits for the GPU at the pass end)"
                                                : "host-bound (the GPU finishes as the host issues the last op)");
        std::fprintf(stderr, "  (GPU busy counts each op from its start to its end event, its kernels' launch latency "
                             "included; profiling adds two event records per op to the host time)\n");
    }
    // Prompt chunks are not graph-captured, so their ops' spans include each launch's host-side latency when the
    // GPU ran dry; nested ops (gdn_block's steps) are counted apart from their outer op.
    if (!outside_entries_.empty()) print_table("outside decode passes (prompt chunks, copies)", outside_entries_);
}

}  // namespace strata::cuda
