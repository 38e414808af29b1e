// The prefetch's copy-engine mode (STRATA_PREFETCH_MODE=dma; expert_prefetch.h): no resident worker. A host thread
// watches the plans' published seqs; for a one-token call of layer l it launches the pick kernel (layer l+1's router
// scored against the plan's x, the choice handed back through mapped memory), then queues on a copy stream of its own
//   wait until the board's stage_done reaches the plan's seq (layer l's staging is done with the link),
//   for each chosen expert: its gate, up and down matrix from pinned host memory into its prefetch slot
//   (cudaMemcpyAsync: the copy engine, no multiprocessor), then its slot's tag = seq + 1 (a stream write after
//   the copies, with the write's memory barrier),
// with the two waits and writes as stream memory operations (cuStreamWaitValue32 / cuStreamWriteValue32, taken from
// the driver through the runtime). Queued copies cannot be called back: at most STRATA_PREFETCH_COPIES a layer (3),
// and none while the last layer's are still running (the next plan uses only those published before it starts; a
// late copy only shares the link with the next staging).
// Why: a resident worker slows the pass's own kernels by its residency alone (~6.5 µs a layer before the plan,
// bench/results/2026-12-04-h200-prefetch2/), and its loads copied at ~32 GB/s where the copy engine reaches ~50.
// Measured there (r48): slower than the worker (a fifth of the misses served against a third); off by default.
#include <chrono>
#include <cstring>
#include <thread>

#include <cuda.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/hybrid_moe.h"
#include "common/error.h"
#include "common/log.h"

namespace strata::cuda {

namespace {

using WaitValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using WriteValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

void* driver_entry(const char* name) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    return fn;
}

void check_cu(CUresult r, const char* what) {
    STRATA_CHECK(r == CUDA_SUCCESS, "expert prefetch: ", what, " failed (CUresult ", (int)r, ")");
}

constexpr int64_t kPickWaitNs = 2'000'000;   // a pick kernel that has not answered within 2 ms: skip the layer
constexpr int64_t kIdleNs = 50'000'000;      // no plan for 50 ms: poll every 200 µs instead of spinning

}  // namespace

bool HybridMoe::start_prefetch_dma() {
    pf_wait_fn_ = driver_entry("cuStreamWaitValue32");
    pf_write_fn_ = driver_entry("cuStreamWriteValue32");
    void* p = nullptr;
    bool ok = pf_wait_fn_ && pf_write_fn_ &&
              cudaStreamCreateWithFlags(&pf_copy_stream_, cudaStreamNonBlocking) == cudaSuccess &&
              cudaEventCreateWithFlags(&pf_copies_done_, cudaEventDisableTiming) == cudaSuccess &&
              cudaHostAlloc(&p, sizeof(PrefetchPick), cudaHostAllocMapped) == cudaSuccess;
    if (ok) {
        pf_pick_ = static_cast<PrefetchPick*>(p);
        std::memset(pf_pick_, 0, sizeof(PrefetchPick));
        pf_pick_->tag = ~0u;
        ok = cudaHostGetDevicePointer(&p, pf_pick_, 0) == cudaSuccess;
        pf_pick_dev_ = static_cast<PrefetchPick*>(p);
    }
    // The stream memory operations must work here: a wait that is already satisfied (stage_done is 0).
    if (ok) {
        const CUresult r = reinterpret_cast<WaitValue32>(pf_wait_fn_)(
            reinterpret_cast<CUstream>(pf_copy_stream_), reinterpret_cast<CUdeviceptr>(&pf_board_->stage_done), 0,
            CU_STREAM_WAIT_VALUE_GEQ);
        ok = r == CUDA_SUCCESS && cudaStreamSynchronize(pf_copy_stream_) == cudaSuccess;
    }
    if (!ok) {
        cudaGetLastError();
        log_info("experts", "prefetch: no copy-engine mode (stream memory operations unavailable); the worker copies");
        return false;
    }
    pf_quit_.store(false);
    pf_thread_ = std::thread([this] { prefetch_dma_main(); });
    return true;
}

void HybridMoe::prefetch_dma_main() {
    uint32_t seen = __atomic_load_n(&words_->published, __ATOMIC_ACQUIRE);
    int64_t last = steady_ns();
    const PrefetchWorkerArgs args = prefetch_args();
    const int L_n = (int)layers_.size();
    try {
        while (!pf_quit_.load(std::memory_order_relaxed)) {
            const uint32_t s = __atomic_load_n(&words_->published, __ATOMIC_ACQUIRE);
            if (s == seen) {
                if (steady_ns() - last > kIdleNs) std::this_thread::sleep_for(std::chrono::microseconds(200));
                continue;
            }
            seen = s;   // (only the newest plan: an older one's layer is already past)
            last = steady_ns();
            const DeviceJob* job = reinterpret_cast<const DeviceJob*>(ring_ + (size_t)(s % kRingSlots) * slot_bytes_);
            const int layer = __atomic_load_n(&job->layer, __ATOMIC_RELAXED);
            const int T = __atomic_load_n(&job->T, __ATOMIC_RELAXED);
            if (__atomic_load_n(&job->seq, __ATOMIC_ACQUIRE) != s) continue;   // the slot was reused meanwhile
            const int next = layer + 1;
            if (T != 1 || next >= L_n || !routers_[next] || pf_copies_ == 0) continue;
            prefetch_dma_request(s, next, args);
        }
    } catch (const std::exception& e) {
        pf_error_ = e.what();
        log_warn("experts", "prefetch copies stopped: " + pf_error_);
    }
}

void HybridMoe::prefetch_dma_request(uint32_t s, int next, const PrefetchWorkerArgs& args) {
    launch_prefetch_pick(pf_stream_, args, s, next, pf_pick_dev_, pf_blocks_);
    const int64_t t0 = steady_ns();
    while (__atomic_load_n(&pf_pick_->tag, __ATOMIC_ACQUIRE) != s) {
        if (steady_ns() - t0 > kPickWaitNs || pf_quit_.load(std::memory_order_relaxed)) {
            ++pf_dma_late_;
            return;
        }
    }
    const int n = std::min<int>(__atomic_load_n(&pf_pick_->n, __ATOMIC_RELAXED), pf_copies_);
    if (n <= 0) return;
    // Queued copies cannot be called back: while the last layer's are still running (late already), queue none, or
    // the queue would only grow and every copy land after the plan it was for.
    const cudaError_t busy = cudaEventQuery(pf_copies_done_);
    if (busy == cudaErrorNotReady) {
        ++pf_dma_late_;
        return;
    }
    CUDA_CHECK(busy);
    const auto wait = reinterpret_cast<WaitValue32>(pf_wait_fn_);
    const auto write = reinterpret_cast<WriteValue32>(pf_write_fn_);
    const CUstream cs = reinterpret_cast<CUstream>(pf_copy_stream_);
    check_cu(wait(cs, reinterpret_cast<CUdeviceptr>(&pf_board_->stage_done), s, CU_STREAM_WAIT_VALUE_GEQ),
             "cuStreamWaitValue32");
    const Layer& L = layers_[next];
    const Weight* mats[3] = {&L.gate, &L.up, &L.down};
    const size_t bytes[3] = {L.gate_bytes, L.up_bytes, L.down_bytes};
    const int par = next & 1;
    for (int i = 0; i < n; ++i) {
        const int e = __atomic_load_n(&pf_pick_->todo[i], __ATOMIC_RELAXED);
        for (int m = 0; m < 3; ++m)
            CUDA_CHECK(cudaMemcpyAsync(pf_area_[m] + (size_t)(par * kPrefetchSlots + i) * stage_stride_[m],
                                       mats[m]->matrix(e), bytes[m], cudaMemcpyHostToDevice, pf_copy_stream_));
        check_cu(write(cs, reinterpret_cast<CUdeviceptr>(&pf_board_->entry_tag[par][i]), s + 1,
                       CU_STREAM_WRITE_VALUE_DEFAULT),
                 "cuStreamWriteValue32");
    }
    CUDA_CHECK(cudaEventRecord(pf_copies_done_, pf_copy_stream_));
    pf_dma_copied_ += n;
    pf_dma_bytes_ += (uint64_t)n * (bytes[0] + bytes[1] + bytes[2]);
}

// The thread leaves, the queued copies finish, and the board's statistics (the plans' counts, the picks') come to
// the host words the summary reads, as the worker leaves them in the other mode.
void HybridMoe::stop_prefetch_dma() {
    if (pf_thread_.joinable()) {
        pf_quit_.store(true);
        pf_thread_.join();
    }
    for (cudaStream_t st : {pf_stream_, pf_copy_stream_}) {
        const cudaError_t e = st ? cudaStreamSynchronize(st) : cudaSuccess;
        if (e != cudaSuccess) log_warn("experts", fmt("prefetch copies: ", cudaGetErrorString(e)));
    }
    PrefetchBoard b{};
    if (pf_board_ && cudaMemcpy(&b, pf_board_, sizeof(b), cudaMemcpyDeviceToHost) == cudaSuccess) {
        PrefetchWords& w = *pf_words_;
        w.requests = b.requests;
        w.miss_pairs = b.miss_pairs;
        w.predicted_pairs = b.predicted_pairs;
        w.used_pairs = b.used_pairs;
        w.copied = pf_dma_copied_;
        w.copied_bytes = pf_dma_bytes_;
        w.aborted = pf_dma_late_;
    } else {
        cudaGetLastError();
    }
}

}  // namespace strata::cuda
