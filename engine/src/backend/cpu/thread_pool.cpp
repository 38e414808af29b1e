#include "backend/cpu/thread_pool.h"

#include "common/platform.h"

#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64)
#include <immintrin.h>
#define STRATA_CPU_RELAX() _mm_pause()
#else
#define STRATA_CPU_RELAX() ((void)0)
#endif

namespace strata {

namespace {
using platform::first_cpu_of_each_core;
using platform::pin_current_thread;

// A decode step issues thousands of small parallel_for calls: workers spin this many times on the job counter
// before they sleep, so a call costs a cache-line round trip instead of a futex wake-up.
constexpr int kSpinIterations = 20000;
}  // namespace

int ThreadPool::default_threads() {
    int cores = (int)first_cpu_of_each_core().size();
    return cores > 1 ? cores - 1 : 1;
}

ThreadPool::ThreadPool(int n_threads, bool pin) {
    n_threads_ = n_threads > 0 ? n_threads : default_threads();
    std::vector<int> cpus = first_cpu_of_each_core();
    if (pin) pin_current_thread(cpus[0]);
    for (int k = 1; k < n_threads_; ++k) {
        workers_.emplace_back([this, k, pin, cpus] {
            if (pin) pin_current_thread(cpus[k % cpus.size()]);
            worker(k);
        });
    }
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_.store(true);
        generation_.fetch_add(1);
    }
    cv_start_.notify_all();
    for (auto& t : workers_) t.join();
}

static void run_piece(const ThreadPool::RangeFn& fn, int64_t n, int index, int n_threads) {
    int64_t begin = n * index / n_threads, end = n * (index + 1) / n_threads;
    if (begin < end) fn(begin, end);
}

void ThreadPool::parallel_for(int64_t n, const RangeFn& fn) {
    if (n <= 0) return;
    if (n_threads_ == 1 || n == 1) { fn(0, n); return; }
    job_ = &fn;
    job_n_ = n;
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    {
        // The lock orders the job fields before the generation bump for sleeping workers.
        std::lock_guard<std::mutex> lock(mu_);
        generation_.fetch_add(1, std::memory_order_release);
    }
    cv_start_.notify_all();
    run_piece(fn, n, 0, n_threads_);
    // Spin briefly, then yield: a worker that lost its core must get it back rather than wait out our time slice.
    for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
        if (spin < kSpinIterations / 8) STRATA_CPU_RELAX();
        else std::this_thread::yield();
    }
    job_ = nullptr;
}

void SpinBarrier::arrive_and_wait() {
    if (n_ <= 1) return;
    const uint32_t phase = phase_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
        // Last to arrive: nobody can reach the next barrier before the phase changes, so the reset is safe.
        arrived_.store(0, std::memory_order_relaxed);
        phase_.store(phase + 1, std::memory_order_release);
        return;
    }
    for (int spin = 0; phase_.load(std::memory_order_acquire) == phase; ++spin) {
        if (spin < kSpinIterations / 8) STRATA_CPU_RELAX();
        else std::this_thread::yield();
    }
}

void ThreadPool::worker(int index) {
    uint64_t seen = 0;
    for (;;) {
        uint64_t gen = generation_.load(std::memory_order_acquire);
        for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
            if (spin < kSpinIterations / 8) STRATA_CPU_RELAX();
            else std::this_thread::yield();
            gen = generation_.load(std::memory_order_acquire);
        }
        if (gen == seen) {
            std::unique_lock<std::mutex> lock(mu_);
            cv_start_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
            gen = generation_.load(std::memory_order_acquire);
        }
        if (stop_.load()) return;
        seen = gen;
        run_piece(*job_, job_n_, index, n_threads_);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

}  // namespace strata
