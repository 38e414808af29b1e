// A fixed pool of worker threads (optionally pinned to cores) plus the calling thread. parallel_for splits an index
// range into contiguous pieces, one per thread; each output element is computed by exactly one thread with the same
// code, so results do not depend on the thread count.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

// Every one of n threads waits in arrive_and_wait until all n have arrived (used inside one parallel_for over
// pool.size() pieces, one per thread, so phases of a job need no second wake-up). Spins, then yields.
class SpinBarrier {
public:
    explicit SpinBarrier(int n) : n_(n) {}
    void arrive_and_wait();

private:
    alignas(64) std::atomic<int> arrived_{0};
    alignas(64) std::atomic<uint32_t> phase_{0};
    int n_;
};

class ThreadPool {
public:
    // n_threads counts the calling thread; 0 = one per physical core but one (at least 1).
    explicit ThreadPool(int n_threads = 0, bool pin = false);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }
    using RangeFn = std::function<void(int64_t begin, int64_t end)>;
    void parallel_for(int64_t n, const RangeFn& fn);

    static int default_threads();   // physical cores minus one, at least 1

private:
    void worker(int index);
    int n_threads_;
    std::vector<std::thread> workers_;
    std::mutex mu_;                      // only for sleeping workers
    std::condition_variable cv_start_;
    const RangeFn* job_ = nullptr;       // written before generation_ is bumped
    int64_t job_n_ = 0;
    std::atomic<bool> stop_{false};
    // Own cache lines: idle workers poll generation_ while finishing workers decrement pending_.
    alignas(64) std::atomic<uint64_t> generation_{0};
    alignas(64) std::atomic<int> pending_{0};   // workers still running the current job
};

}  // namespace strata
