// The round trip the hybrid path's device join pays a layer, alone: a one-thread kernel writes seq i to a mapped
// word, a host thread that polls it (as the dispatcher polls the ring) writes i back to a second mapped word, the
// kernel polls that one (as the join polls `done`). Times on the GPU's clock, median and p90 of 2,000 trips, with
// the host idle and with N threads streaming DRAM (the CPU pool's load). Also the kernel-side polls with and
// without __nanosleep between reads. usage: mapped_pingpong [LOAD_THREADS=6]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#define CHECK_CUDA(x)                                                                                     \
    do {                                                                                                  \
        cudaError_t e_ = (x);                                                                             \
        if (e_ != cudaSuccess) {                                                                          \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));       \
            std::exit(1);                                                                                 \
        }                                                                                                 \
    } while (0)

constexpr int kTrips = 2000;

__device__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void ping_kernel(volatile unsigned* to_host, const unsigned* from_host, unsigned long long* rtt,
                            int sleep_ns) {
    for (int i = 1; i <= kTrips; ++i) {
        const unsigned long long t0 = now_ns();
        *to_host = (unsigned)i;
        __threadfence_system();
        while (__ldcv(from_host) != (unsigned)i)
            if (sleep_ns) __nanosleep(sleep_ns);
        rtt[i - 1] = now_ns() - t0;
    }
}

int main(int argc, char** argv) {
    const int load_threads = argc > 1 ? std::atoi(argv[1]) : 6;
    unsigned* words = nullptr;
    CHECK_CUDA(cudaHostAlloc(&words, 4096, cudaHostAllocMapped));
    std::memset(words, 0, 4096);
    unsigned* d_words = nullptr;
    CHECK_CUDA(cudaHostGetDevicePointer((void**)&d_words, words, 0));
    unsigned long long* d_rtt = nullptr;
    CHECK_CUDA(cudaMalloc(&d_rtt, kTrips * sizeof(unsigned long long)));
    // A 1 GiB buffer the load threads stream through (the pool's expert reads stand-in).
    const size_t load_bytes = (size_t)1 << 30;
    std::vector<char> load(load_bytes, 1);

    for (int loaded = 0; loaded < 2; ++loaded)
        for (int sleep_ns : {0, 200}) {
            words[0] = 0;
            words[32] = 0;   // another cache line
            std::atomic<bool> stop{false};
            std::vector<std::thread> streams;
            std::atomic<long long> sink{0};
            for (int t = 0; loaded && t < load_threads; ++t)
                streams.emplace_back([&, t] {
                    long long s = 0;
                    const size_t part = load_bytes / load_threads;
                    while (!stop.load(std::memory_order_relaxed))
                        for (size_t i = part * t; i < part * (t + 1); i += 64) s += load[i];
                    sink += s;
                });
            std::thread echo([&] {   // the dispatcher's part: poll, answer
                volatile unsigned* in = words;
                volatile unsigned* out = words + 32;
                unsigned seen = 0;
                while (seen < (unsigned)kTrips) {
                    const unsigned v = *in;
                    if (v != seen) {
                        seen = v;
                        __atomic_store_n(const_cast<unsigned*>(out), v, __ATOMIC_RELEASE);
                    }
                }
            });
            ping_kernel<<<1, 1>>>(d_words, d_words + 32, d_rtt, sleep_ns);
            CHECK_CUDA(cudaGetLastError());
            CHECK_CUDA(cudaDeviceSynchronize());
            echo.join();
            stop = true;
            for (auto& th : streams) th.join();
            std::vector<unsigned long long> rtt(kTrips);
            CHECK_CUDA(cudaMemcpy(rtt.data(), d_rtt, kTrips * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
            std::sort(rtt.begin(), rtt.end());
            std::printf("mapped round trip, host %s, kernel poll sleep %d ns: median %.2f us, p90 %.2f us, max %.2f us\n",
                        loaded ? "streaming DRAM" : "idle", sleep_ns, rtt[kTrips / 2] / 1e3,
                        rtt[kTrips * 9 / 10] / 1e3, rtt.back() / 1e3);
        }
    CHECK_CUDA(cudaFreeHost(words));
    CHECK_CUDA(cudaFree(d_rtt));
    return 0;
}
