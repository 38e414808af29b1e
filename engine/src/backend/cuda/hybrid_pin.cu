// HybridMoe's routed experts in page-locked host memory, loaded once at start: the mapped file locked in place where
// the driver allows it, else one pinned piece per layer (gate | up | down), filled and locked by several loader
// threads at once: anonymous memory filled from the file, then cudaHostRegister (Linux; H200 host: 6.6 GB/s for
// 4 GiB from 16 threads, where cudaHostAlloc's page locking runs one call at a time: 2.1 GB/s, tests/gpu/pin_speed).
// The rest of the class is in hybrid_moe.cu.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#ifdef __linux__
#include <sys/mman.h>
#endif

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/hybrid_moe.h"
#include "common/env.h"
#include "common/error.h"
#include "common/log.h"

namespace strata::cuda {

namespace {
size_t matrix_bytes(const Weight& w) { return (size_t)w.ne[1] * w.row_bytes; }

// Asks the kernel to read a mapped range ahead (the loader then copies from the page cache, not page by page).
void read_ahead(const void* p, size_t bytes) {
#ifdef __linux__
    const uintptr_t page = 4096, lo = (uintptr_t)p & ~(page - 1);
    madvise(reinterpret_cast<void*>(lo), (uintptr_t)p + bytes - lo, MADV_WILLNEED);
#else
    (void)p;
    (void)bytes;
#endif
}
// The pinned pieces ask for transparent huge pages (madvise before they are filled; the kernel's THP mode is often
// "madvise", so without it none are used). On the H200 host (r33, 32 GB of experts, 16 loader threads) this pins in
// 1.3-1.4 s instead of 2.4-4.2 s (fewer pages to fault, fill and lock); the CPU pool's decode rate was the same with
// and without (104.1 / 103.3 / 106.1 vs 104.4 / 104.0 / 105.6 tok/s). STRATA_PIN_HUGEPAGES=0 turns it off; read once.
bool pin_hugepages() {
    static const bool on = env_switch("STRATA_PIN_HUGEPAGES", true);
    return on;
}

// MiB of this process's anonymous memory on transparent huge pages (/proc/self/smaps_rollup), -1 when unknown.
int64_t anon_hugepages_mib() {
    std::ifstream f("/proc/self/smaps_rollup");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("AnonHugePages:", 0) == 0) return std::atoll(line.c_str() + 14) >> 10;
    return -1;
}

// Bytes of host RAM the experts may pin: MemAvailable (page cache included) less a reserve for the OS and the rest
// of the engine (the larger of 4 GiB and 10% of RAM); STRATA_PIN_MAX_MIB overrides. Unknown (no /proc): no limit.
int64_t pin_budget() {
    if (const char* env = std::getenv("STRATA_PIN_MAX_MIB")) return (int64_t)std::atoll(env) << 20;
    std::ifstream f("/proc/meminfo");
    std::string key;
    int64_t kib = 0, total = -1, avail = -1;
    std::string unit;
    while (f >> key >> kib >> unit) {
        if (key == "MemTotal:") total = kib << 10;
        if (key == "MemAvailable:") avail = kib << 10;
    }
    if (total < 0 || avail < 0) return INT64_MAX;
    return std::max<int64_t>(0, avail - std::max<int64_t>(4ll << 30, total / 10));
}
}  // namespace

void HybridMoe::pin_experts() {
    const auto t0 = std::chrono::steady_clock::now();
    pinned_all_ = true;
    pinned_bytes_ = 0;
    for (const Layer& L : layers_) pinned_bytes_ += (int64_t)(L.gate_bytes + L.up_bytes + L.down_bytes) * n_experts_;
    if (register_mapped()) {
        pin_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        pin_threads_ = 1;
        return;
    }
    // Loader threads each take the next layer: its piece filled from the mapped file, then locked (see the top).
    // STRATA_PIN=alloc takes cudaHostAlloc + copy instead (the way before; the only one off Linux).
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    const char* way = std::getenv("STRATA_PIN");
#ifdef __linux__
    const bool register_pieces = !(way && std::strcmp(way, "alloc") == 0);
#else
    const bool register_pieces = false;
    (void)way;
#endif
    const char* env = std::getenv("STRATA_PIN_THREADS");
    const int hw = (int)std::max(1u, std::thread::hardware_concurrency());
    pin_threads_ = std::max(1, std::min<int>(env ? std::atoi(env) : std::min(hw, 16), (int)layers_.size()));
    std::atomic<int> next{0}, failed{0}, over_budget{0};
    std::atomic<int64_t> budget{pin_budget()};
    std::mutex mu;
    double alloc_s = 0, fill_s = 0;   // summed over threads
    std::string first_error;
    auto loader = [&] {
        if (cudaSetDevice(device) != cudaSuccess) {
            cudaGetLastError();
            return;   // the other threads take its layers
        }
        double a_s = 0, f_s = 0;
        for (int l; (l = next.fetch_add(1)) < (int)layers_.size();) {
            Layer& L = layers_[l];
            const size_t g = L.gate_bytes * n_experts_, u = L.up_bytes * n_experts_, d = L.down_bytes * n_experts_;
            if (budget.fetch_sub((int64_t)(g + u + d)) < (int64_t)(g + u + d)) {   // RAM left for the OS
                budget.fetch_add((int64_t)(g + u + d));
                ++over_budget;
                continue;
            }
            for (const auto& [src, n] : {std::pair{L.gate.data, g}, {L.up.data, u}, {L.down.data, d}})
                read_ahead(src, n);
            const size_t bytes = g + u + d;
            void* p = nullptr;
            cudaError_t st = cudaSuccess;
            auto fill = [&](uint8_t* b) {
                const auto t = std::chrono::steady_clock::now();
                std::memcpy(b, L.gate.data, g);
                std::memcpy(b + g, L.up.data, u);
                std::memcpy(b + g + u, L.down.data, d);
                f_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
            };
            const auto ta = std::chrono::steady_clock::now();
#ifdef __linux__
            if (register_pieces) {
                p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (p == MAP_FAILED) {
                    p = nullptr;
                    st = cudaErrorMemoryAllocation;
                } else {
                    if (pin_hugepages()) madvise(p, bytes, MADV_HUGEPAGE);   // advice only: failure changes nothing
                    fill(static_cast<uint8_t*>(p));
                    const auto tr = std::chrono::steady_clock::now();
                    st = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
                    a_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - tr).count();
                    if (st != cudaSuccess) {
                        munmap(p, bytes);
                        p = nullptr;
                    }
                }
            }
#endif
            if (!register_pieces) {
                st = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
                a_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - ta).count();
                if (st == cudaSuccess) fill(static_cast<uint8_t*>(p));
            }
            if (st != cudaSuccess) {
                cudaGetLastError();
                ++failed;
                std::lock_guard<std::mutex> lk(mu);
                if (first_error.empty())
                    first_error = fmt("layer ", l, ": locking ", bytes >> 20, " MiB: ", cudaGetErrorString(st));
                continue;
            }
            uint8_t* b = static_cast<uint8_t*>(p);
            L.pinned = p;
            L.pinned_size = register_pieces ? bytes : 0;
            L.gate.data = b;
            L.up.data = b + g;
            L.down.data = b + g + u;
        }
        std::lock_guard<std::mutex> lk(mu);
        alloc_s += a_s;
        fill_s += f_s;
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < pin_threads_; ++t) threads.emplace_back(loader);
    for (std::thread& t : threads) t.join();
    STRATA_CHECK(next.load() >= (int)layers_.size(), "experts: no loader thread could select CUDA device ", device);
    pin_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (failed || over_budget) {
        // Those layers stay in the mapped file: the CPU pool reads them as before, but their prompt-chunk copies
        // and cache moves go through the driver's pageable staging (slower, and they block the host).
        pinned_all_ = false;
        for (const Layer& L : layers_)
            if (!L.pinned) pinned_bytes_ -= (int64_t)(L.gate_bytes + L.up_bytes + L.down_bytes) * n_experts_;
        log_warn("experts", fmt(failed.load() + over_budget.load(), " of ", layers_.size(),
                                " layers' experts are not pinned (", over_budget.load(),
                                " past the RAM the OS keeps, STRATA_PIN_MAX_MIB", failed ? "; " + first_error : "",
                                "); they are read from the mapped file"));
    }
    log_info("experts", fmt("experts pinned: ", pinned_bytes_ >> 20, " MiB in ", (int)(pin_s_ * 1000), " ms (",
                            (int)(pinned_bytes_ / std::max(pin_s_, 1e-9) / 1e8) / 10.0, " GB/s), ", pin_threads_,
                            " loader threads; locking ", (int)(alloc_s * 1000), " ms, copies ",
                            (int)(fill_s * 1000), " ms (summed over threads; ",
                            register_pieces ? "filled, then cudaHostRegister" : "cudaHostAlloc, then filled", "); ",
                            anon_hugepages_mib(), " MiB of the process on huge pages",
                            pin_hugepages() ? "" : " (STRATA_PIN_HUGEPAGES=0)"));
}

void HybridMoe::unpin_experts() {
    for (Layer& L : layers_) {
        if (!L.pinned) continue;
#ifdef __linux__
        if (L.pinned_size) {
            cudaHostUnregister(L.pinned);
            munmap(L.pinned, L.pinned_size);
            L.pinned = nullptr;
            continue;
        }
#endif
        cudaFreeHost(L.pinned);
        L.pinned = nullptr;
    }
}

bool HybridMoe::register_mapped() {
    const char* env = std::getenv("STRATA_PIN");
    if (env && std::strcmp(env, "copy") == 0) return false;
    int device = 0, read_only = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    if (cudaDeviceGetAttribute(&read_only, cudaDevAttrHostRegisterReadOnlySupported, device) != cudaSuccess ||
        !read_only) {
        cudaGetLastError();
        return false;
    }
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (const Layer& L : layers_)
        for (const Weight* w : {&L.gate, &L.up, &L.down}) {
            lo = std::min(lo, (uintptr_t)w->data);
            hi = std::max(hi, (uintptr_t)w->data + matrix_bytes(*w) * (size_t)n_experts_);
        }
    constexpr uintptr_t kPage = 4096;
    lo &= ~(kPage - 1);
    hi = (hi + kPage - 1) & ~(kPage - 1);
    const cudaError_t st = cudaHostRegister(reinterpret_cast<void*>(lo), hi - lo,
                                            cudaHostRegisterReadOnly | cudaHostRegisterPortable);
    if (st != cudaSuccess) {
        cudaGetLastError();
        log_info("experts", fmt("locking the mapped experts in place failed (", cudaGetErrorString(st),
                                "); copying them into pinned memory"));
        return false;
    }
    registered_ = reinterpret_cast<void*>(lo);
    return true;
}

}  // namespace strata::cuda
