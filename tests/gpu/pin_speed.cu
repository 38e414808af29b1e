// How fast host memory can be page-locked and filled on this machine, the ways the hybrid path could load its
// experts (hybrid_pin.cu uses the first): cudaHostAlloc + memcpy per piece from N threads at once; and anonymous
// memory filled by N threads, then cudaHostRegister. Pieces of 512 MiB (about one layer of the synthetic model), a
// source buffer standing in for the page cache. Then H2D copies from the pinned pieces: 1.4 MB (one expert) and
// 88 MB (a staging batch). usage: pin_speed [GiB=8]; prints one line per way and size.
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_check.h"

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
constexpr size_t kPiece = 512ull << 20;

template <class Fn>
void in_threads(int n, int pieces, Fn&& fn) {
    std::vector<std::thread> t;
    for (int i = 0; i < n; ++i)
        t.emplace_back([&, i] {
            CUDA_CHECK(cudaSetDevice(0));
            for (int p = i; p < pieces; p += n) fn(p);
        });
    for (auto& x : t) x.join();
}
}  // namespace

int main(int argc, char** argv) {
    const int gib = argc > 1 ? std::atoi(argv[1]) : 8;
    const int pieces = gib * 2;
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaFree(nullptr));
    uint8_t* src = static_cast<uint8_t*>(std::malloc(kPiece));
    std::memset(src, 7, kPiece);
    for (int threads : {1, 8, 16}) {
        std::vector<void*> p(pieces, nullptr);
        std::vector<double> alloc_s(pieces), copy_s(pieces);
        const double t0 = now();
        in_threads(threads, pieces, [&](int i) {
            const double a = now();
            CUDA_CHECK(cudaHostAlloc(&p[i], kPiece, cudaHostAllocDefault));
            const double b = now();
            std::memcpy(p[i], src, kPiece);
            alloc_s[i] = b - a;
            copy_s[i] = now() - b;
        });
        const double wall = now() - t0;
        double a = 0, c = 0;
        for (int i = 0; i < pieces; ++i) { a += alloc_s[i]; c += copy_s[i]; }
        std::printf("cudaHostAlloc+memcpy  %2d threads: %d GiB in %.2f s = %.1f GB/s (alloc %.2f s, copy %.2f s summed)\n",
                    threads, gib, wall, gib * 1.073741824 / wall, a, c);
        if (threads == 16) {   // H2D speed from these pinned pieces
            void* d = nullptr;
            CUDA_CHECK(cudaMalloc(&d, 88ull << 20));
            cudaStream_t s;
            CUDA_CHECK(cudaStreamCreate(&s));
            for (size_t bytes : {(size_t)460800, (size_t)1382400, (size_t)88 << 20}) {
                const int n = (int)std::max<size_t>(8, (2ull << 30) / bytes);
                CUDA_CHECK(cudaStreamSynchronize(s));
                const double h0 = now();
                for (int i = 0; i < n; ++i)
                    CUDA_CHECK(cudaMemcpyAsync(d, static_cast<uint8_t*>(p[i % pieces]) + (i * bytes) % (kPiece - bytes),
                                               bytes, cudaMemcpyHostToDevice, s));
                CUDA_CHECK(cudaStreamSynchronize(s));
                const double h = now() - h0;
                std::printf("H2D from pinned, %zu-byte copies: %.1f GB/s\n", bytes, n * (double)bytes / h / 1e9);
            }
            CUDA_CHECK(cudaStreamDestroy(s));
            CUDA_CHECK(cudaFree(d));
        }
        for (void* q : p) CUDA_CHECK(cudaFreeHost(q));
    }
    for (int threads : {8, 16}) {
        std::vector<void*> p(pieces, nullptr);
        const double t0 = now();
        in_threads(threads, pieces, [&](int i) {
            p[i] = mmap(nullptr, kPiece, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p[i] == MAP_FAILED) { std::printf("mmap failed\n"); std::exit(1); }
            std::memcpy(p[i], src, kPiece);
        });
        const double filled = now() - t0;
        in_threads(threads, pieces, [&](int i) { CUDA_CHECK(cudaHostRegister(p[i], kPiece, cudaHostRegisterDefault)); });
        const double wall = now() - t0;
        std::printf("mmap+fill, then cudaHostRegister %2d threads: %d GiB in %.2f s = %.1f GB/s (fill %.2f s, register %.2f s)\n",
                    threads, gib, wall, gib * 1.073741824 / wall, filled, wall - filled);
        for (void* q : p) {
            CUDA_CHECK(cudaHostUnregister(q));
            munmap(q, kPiece);
        }
    }
    std::free(src);
    return 0;
}
