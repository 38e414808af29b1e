// HybridMoe's join of the CPU misses with the GPU: the dispatcher thread that runs each layer's CPU job and
// publishes it in a mapped flag the stream waits on, and the counters (CUDA events around the wait time the GPU's
// idle time). The rest of the class is in hybrid_moe.cu.
#include <chrono>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/hybrid_moe.h"
#include "common/error.h"

namespace strata::cuda {

void HybridMoe::cpu_thread_main() {
    // No CUDA call on this thread: the activations and the results travel through mapped memory flags.
    uint64_t taken = 0;
    auto now_ns = [] {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(
                   std::chrono::steady_clock::now().time_since_epoch()).count();
    };
    for (;;) {
        // Device jobs (hybrid_device.h) are polled from the ring; host jobs come through job_. Jobs come a few
        // hundred µs apart (one per MoE layer): poll while armed (a pass is running) or a while after the last host
        // job, so a job does not pay a futex wake-up before the CPU starts on it; then sleep.
        bool ran = false;
        for (int spin = 0; !ran && posted_.load(std::memory_order_acquire) == taken; ++spin) {
            if (device_on_ && run_device_job()) ran = true;
            else if (spin >= 20000 && now_ns() > armed_until_ns_.load(std::memory_order_relaxed)) break;
            else std::this_thread::yield();
        }
        if (ran) continue;
        std::unique_lock<std::mutex> lk(mu_);
        if (posted_.load(std::memory_order_acquire) == taken && !quit_) {
            // Asleep: a pass boundary (between_passes) or a host job wakes it; the bound covers a missed wake-up.
            cv_.wait_for(lk, std::chrono::milliseconds(2), [&] {
                return job_ready_ || quit_ || now_ns() < armed_until_ns_.load(std::memory_order_relaxed);
            });
        }
        if (!job_ready_) {
            if (quit_) return;   // quit with nothing queued
            continue;
        }
        CpuJob job = std::move(job_);
        job_ready_ = false;
        job_running_ = true;
        taken = posted_.load(std::memory_order_relaxed);
        lk.unlock();
        std::exception_ptr err;
        double wait_s = 0;
        try {
            // The activations arrive through mapped memory (publish_to_host): poll, no CUDA call on this thread.
            const auto t0 = std::chrono::steady_clock::now();
            for (uint64_t spin = 0; (int32_t)(x_flag_->load(std::memory_order_acquire) - job.seq) < 0; ++spin) {
                if (spin > 64) std::this_thread::yield();
                if ((spin & 1023) == 0 && std::chrono::steady_clock::now() - t0 > std::chrono::seconds(60))
                    fail("experts: the activations of CPU job ", job.seq, " never reached the host");
            }
            wait_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            cpu_->compute(job.layer->gate, job.layer->up, job.layer->down, job.h_x, job.misses, job.h_out);
        } catch (...) {
            err = std::current_exception();
        }
        // Always published: the GPU stream waits for it (on an error the results are not used, moe_experts throws).
        flag_->store(job.seq, std::memory_order_release);
        lk.lock();
        job_running_ = false;
        job_wait_s_ += wait_s;
        if (err && !job_error_) job_error_ = err;
        cv_.notify_all();
    }
}

void HybridMoe::submit_cpu_job(CpuJob job) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        job_ = std::move(job);
        job_ready_ = true;
        posted_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
}

void HybridMoe::wait_cpu_idle() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return !job_ready_ && !job_running_; });
    if (job_error_) {
        std::exception_ptr e = job_error_;
        job_error_ = nullptr;
        std::rethrow_exception(e);
    }
}

void HybridMoe::harvest_join_timings(bool wait) {
    for (size_t i = 0; i < timings_.size();) {
        JoinTiming& t = timings_[i];
        const cudaError_t st = wait ? cudaEventSynchronize(t.misses_in) : cudaEventQuery(t.misses_in);
        if (st == cudaErrorNotReady) { ++i; continue; }
        CUDA_CHECK(st);
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, t.hits_done, t.misses_in));
        counters_.gpu_wait_ms += ms;
        free_timings_.push_back(t);
        timings_.erase(timings_.begin() + i);
    }
}

HybridCounters HybridMoe::counters() {
    if (cpu_thread_.joinable()) wait_cpu_idle();
    if (device_on_) CUDA_CHECK(cudaStreamSynchronize(stream_));   // every device job posted, then all taken
    drain_device_jobs();
    harvest_join_timings(true);
    harvest_copy_timings(true);
    HybridCounters c = counters_;
    c.hits = hits();
    c.lookups = lookups();
    c.cpu_ms = cpu_ ? cpu_->seconds() * 1000 : 0;
    std::lock_guard<std::mutex> lk(mu_);
    c.host_wait_ms += job_wait_s_ * 1000;
    if (words_) c.gpu_wait_ms += (double)words_->wait_ns / 1e6;   // the device join's waits
    return c;
}

}  // namespace strata::cuda
