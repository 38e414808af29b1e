// The hybrid path's join through mapped memory (hybrid_moe.h), on a GPU: publish_to_host writes activations and a
// flag into mapped host memory, a host thread polls the flag, computes, publishes its own flag; wait_host_flag holds
// the stream until then and the copy after it sees the host's results. 200 rounds, sizes of 1 to 31 token rows,
// with the GPU sometimes ahead of the host and sometimes behind. Prints "hybrid_join_test: N checks, 0 failed".
#include <atomic>
#include <chrono>
#include <cstdio>
#include <new>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/hybrid_moe.h"

using namespace strata::cuda;

int main() {
    const int H = 2560, rounds = 200;
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void* page = nullptr;
    CUDA_CHECK(cudaHostAlloc(&page, 64, cudaHostAllocMapped));
    auto* done = new (page) std::atomic<uint32_t>(0);                                // host → GPU
    auto* arrived = new (static_cast<uint32_t*>(page) + 2) std::atomic<uint32_t>(0);  // GPU → host
    uint32_t* d_page = nullptr;
    CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&d_page), page, 0));
    strata::cuda::PinnedBuffer h_x(true), h_out;
    float* hx = static_cast<float*>(h_x.get((size_t)31 * H * 4));
    float* ho = static_cast<float*>(h_out.get((size_t)31 * H * 4));
    float *d_x = nullptr, *d_out = nullptr;
    CUDA_CHECK(cudaMalloc(&d_x, (size_t)31 * H * 4));
    CUDA_CHECK(cudaMalloc(&d_out, (size_t)31 * H * 4));
    std::vector<float> x((size_t)31 * H), back((size_t)31 * H);
    int checks = 0, failed = 0;
    for (uint32_t seq = 1; seq <= (uint32_t)rounds; ++seq) {
        const int T = 1 + (int)(seq * 7 % 31);
        const size_t n = (size_t)T * H;
        for (size_t i = 0; i < n; ++i) x[i] = (float)((seq * 131u + i) % 65536u);   // exact in float
        CUDA_CHECK(cudaMemcpyAsync(d_x, x.data(), n * 4, cudaMemcpyHostToDevice, s));
        publish_to_host(s, d_x, n, static_cast<float*>(h_x.device()), d_page + 2, seq);
        // The host side: the CPU job of the hybrid path, on its own thread, sometimes slower than the GPU.
        std::thread cpu([&, seq, n] {
            while ((int32_t)(arrived->load(std::memory_order_acquire) - seq) < 0) std::this_thread::yield();
            if (seq % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
            for (size_t i = 0; i < n; ++i) ho[i] = hx[i] + 1.0f;
            done->store(seq, std::memory_order_release);
        });
        wait_host_flag(s, d_page, seq, d_page + 1);
        CUDA_CHECK(cudaMemcpyAsync(d_out, ho, n * 4, cudaMemcpyHostToDevice, s));
        CUDA_CHECK(cudaMemcpyAsync(back.data(), d_out, n * 4, cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        cpu.join();
        int bad = 0;
        for (size_t i = 0; i < n; ++i) bad += back[i] != x[i] + 1.0f;
        ++checks;
        if (bad || static_cast<volatile uint32_t*>(page)[1] != 0) {
            ++failed;
            std::printf("FAIL round %u (T %d): %d of %zu values wrong, timed_out %u\n", seq, T, bad, n,
                        static_cast<volatile uint32_t*>(page)[1]);
        }
    }
    std::printf("hybrid_join_test: %d checks, %d failed\n", checks, failed);
    cudaFree(d_x);
    cudaFree(d_out);
    cudaFreeHost(page);
    cudaStreamDestroy(s);
    return failed ? 1 : 0;
}
