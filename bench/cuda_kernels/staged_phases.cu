// Where the staged one-row matmul's time goes (issue #7): the GDN input projection (Q2_0, 16,480 rows of 2,560,
// 11.9 MB) takes ~10 µs a call in a decode pass (Nsight, bench/results/2026-12-04-h200-fold/) where a kernel that only
// streams that many bytes needs ~3.4 µs. Five kernels of the same grid, each adding one step of
// matmul_q8_staged_kernel (kernels/matmul_q8.cuh) to the one before:
//   stream      1,030 blocks × 128 threads read the call's bytes side by side (16-byte loads), no rows
//   rows        each warp reads its 4 rows' 16-byte words (2.9 KB, all loads issued before any is used), as the
//               staged kernel does, and folds them into one word
//   rows_smem   the same words stored into the warp's shared memory and read back (the staging itself)
//   act_rows    the block first copies a 2.9 KB activation row into shared memory and waits for it (the prologue)
//   matmul      the real call (cuda::matmul, the staged path: decode and dot products from shared memory)
// and stream, act_rows and matmul again with every launch reading the same window (*_l2: the weights in L2).
// Each timed as N launches in one CUDA graph, launch p reading its own 11.9 MB window of a 1 GiB buffer (so weights
// come from HBM, as in a pass), 10 timed runs after 3 warm-ups (CUDA events); µs a call and GB/s of weights.
// usage: staged_phases [N=200]
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/kernels.h"

namespace {

using strata::GgmlType;

constexpr int64_t kRows = 16480;                // the GDN input projection's rows (qkv + z + b + a)
constexpr int kN = 2560;                        // inputs a row
constexpr size_t kRowBytes = kN / 64 * 18;      // Q2_0: 64 weights in 18 bytes
constexpr size_t kCallBytes = kRows * kRowBytes;
constexpr size_t kBufferBytes = size_t(1) << 30;
constexpr int kWarps = 4, kGroupRows = 4, kBatch = 8;   // the staged kernel's shape (matmul_q8.cuh)
constexpr int kBlocks = (int)((kRows + kWarps * kGroupRows - 1) / (kWarps * kGroupRows));   // 1,030
constexpr size_t kGroupWords = (kGroupRows * kRowBytes + 15) / 16 + 1;
constexpr size_t kActBytes = kN + kN / 32 * 4;   // an int8 row and its Q8_0 scales

// The window launch p reads (256-byte aligned).
size_t window(int p) { return (size_t)p * kCallBytes % (kBufferBytes - kCallBytes) / 256 * 256; }

__device__ __forceinline__ unsigned fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

// The folded words decide only an impossible store, so the loads are kept.
__device__ __forceinline__ void keep(unsigned acc, unsigned* out) {
    if (acc == 0x9e3779b9u) out[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(kWarps * 32) stream_kernel(const uint4* w, unsigned* out) {
    const size_t words = kCallBytes / 16, per_block = (words + gridDim.x - 1) / gridDim.x;
    const size_t b0 = (size_t)blockIdx.x * per_block, b1 = b0 + per_block < words ? b0 + per_block : words;
    unsigned acc = 0;
    for (size_t i = b0 + threadIdx.x; i < b1; i += blockDim.x) acc ^= fold(__ldcs(w + i));
    keep(acc, out);
}

// STEPS: 0 rows, 1 + staged through shared memory, 2 + the activation prologue.
template <int STEPS>
__global__ void __launch_bounds__(kWarps * 32) rows_kernel(const uint8_t* W, const uint4* act, unsigned* out) {
    __shared__ uint4 act_s[(kActBytes + 15) / 16];
    __shared__ uint4 buf[kWarps][kGroupWords];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned acc = 0;
    if (STEPS >= 2) {
        for (size_t i = threadIdx.x; i < (kActBytes + 15) / 16; i += blockDim.x) act_s[i] = __ldg(act + i);
        __syncthreads();
        acc ^= fold(act_s[lane]);
    }
    const int64_t r0 = ((int64_t)blockIdx.x * kWarps + warp) * kGroupRows;
    if (r0 < kRows) {
        const int nr = (int)(kRows - r0 < kGroupRows ? kRows - r0 : kGroupRows);
        const size_t start = (size_t)r0 * kRowBytes, a0 = start & ~(size_t)15;
        const int nw = (int)((start + (size_t)nr * kRowBytes + 15 - a0) / 16);
        const uint4* src = (const uint4*)(W + a0);
        for (int i0 = 0; i0 < nw; i0 += 32 * kBatch) {
            uint4 v[kBatch];
#pragma unroll
            for (int j = 0; j < kBatch; ++j)
                if (i0 + lane + 32 * j < nw) v[j] = __ldg(src + i0 + lane + 32 * j);
#pragma unroll
            for (int j = 0; j < kBatch; ++j)
                if (i0 + lane + 32 * j < nw) {
                    if (STEPS >= 1) buf[warp][i0 + lane + 32 * j] = v[j];
                    else acc ^= fold(v[j]);
                }
        }
        if (STEPS >= 1) {
            __syncwarp();
            for (int i = lane; i < nw; i += 32) acc ^= fold(buf[warp][i]);
        }
    }
    keep(acc, out);
}

struct Case {
    const char* name;
    int kind;          // 0 stream, 1-3 rows_kernel<kind - 1>, 4 matmul
    bool hot = false;  // every launch reads the same window (it stays in L2: what a prefetch into L2 could give)
};

}  // namespace

int main(int argc, char** argv) {
    try {
        const int n = argc > 1 ? std::atoi(argv[1]) : 200;
        if (n < 1) {
            std::fprintf(stderr, "usage: staged_phases [N=200]\n");
            return 2;
        }
        uint8_t* w = nullptr;
        CUDA_CHECK(cudaMalloc(&w, kBufferBytes));
        CUDA_CHECK(cudaMemset(w, 0x11, kBufferBytes));   // Q2_0 blocks with a small positive fp16 scale
        int8_t* aq = nullptr;
        float* ad = nullptr;
        float* y = nullptr;
        unsigned* out = nullptr;
        CUDA_CHECK(cudaMalloc(&aq, kActBytes));
        CUDA_CHECK(cudaMemset(aq, 0x03, kN));
        CUDA_CHECK(cudaMalloc(&ad, kN / 32 * sizeof(float)));
        const std::vector<float> scales(kN / 32, 0.01f);
        CUDA_CHECK(cudaMemcpy(ad, scales.data(), scales.size() * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMalloc(&y, kRows * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&out, kBlocks * sizeof(unsigned)));
        cudaStream_t s;
        CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

        const Case cases[] = {{"stream", 0}, {"rows", 1}, {"rows_smem", 2}, {"act_rows", 3}, {"matmul", 4},
                              {"stream_l2", 0, true}, {"act_rows_l2", 3, true}, {"matmul_l2", 4, true}};
        std::printf("staged_phases: %lld rows x %d (Q2_0, %.2f MB a call), %d calls a graph\n", (long long)kRows, kN,
                    kCallBytes / 1e6, n);
        strata::cuda::MatmulArgs m;
        m.type = GgmlType::Q2_0;
        m.row_bytes = kRowBytes;
        m.rows = kRows;
        m.n = kN;
        m.w = w;
        strata::cuda::matmul(s, m, nullptr, strata::cuda::ActQ8{aq, ad}, 1, y);   // its one-time set-up, uncaptured
        CUDA_CHECK(cudaStreamSynchronize(s));
        for (const Case& c : cases) {
            const int64_t staged_before = strata::cuda::matmul_t1_staged_calls();
            cudaGraph_t g;
            CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
            for (int p = 0; p < n; ++p) {
                const uint8_t* wp = w + (c.hot ? 0 : window(p));
                switch (c.kind) {
                case 0: stream_kernel<<<kBlocks, kWarps * 32, 0, s>>>((const uint4*)wp, out); break;
                case 1: rows_kernel<0><<<kBlocks, kWarps * 32, 0, s>>>(wp, (const uint4*)aq, out); break;
                case 2: rows_kernel<1><<<kBlocks, kWarps * 32, 0, s>>>(wp, (const uint4*)aq, out); break;
                case 3: rows_kernel<2><<<kBlocks, kWarps * 32, 0, s>>>(wp, (const uint4*)aq, out); break;
                default:
                    m.w = wp;
                    strata::cuda::matmul(s, m, nullptr, strata::cuda::ActQ8{aq, ad}, 1, y);
                }
                CUDA_CHECK(cudaGetLastError());
            }
            CUDA_CHECK(cudaStreamEndCapture(s, &g));
            cudaGraphExec_t exec;
            CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
            cudaEvent_t e0, e1;
            CUDA_CHECK(cudaEventCreate(&e0));
            CUDA_CHECK(cudaEventCreate(&e1));
            for (int i = 0; i < 3; ++i) CUDA_CHECK(cudaGraphLaunch(exec, s));
            CUDA_CHECK(cudaEventRecord(e0, s));
            for (int i = 0; i < 10; ++i) CUDA_CHECK(cudaGraphLaunch(exec, s));
            CUDA_CHECK(cudaEventRecord(e1, s));
            CUDA_CHECK(cudaEventSynchronize(e1));
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            const double us = ms * 1e3 / (10.0 * n);
            std::printf("  %-10s %7.2f us a call  %7.0f GB/s%s\n", c.name, us, kCallBytes / us / 1e3,
                        c.kind == 4 && strata::cuda::matmul_t1_staged_calls() == staged_before
                            ? "  (NOT the staged kernel)"
                            : "");
            CUDA_CHECK(cudaEventDestroy(e0));
            CUDA_CHECK(cudaEventDestroy(e1));
            CUDA_CHECK(cudaGraphExecDestroy(exec));
            CUDA_CHECK(cudaGraphDestroy(g));
        }
        CUDA_CHECK(cudaStreamDestroy(s));
        CUDA_CHECK(cudaFree(w));
        CUDA_CHECK(cudaFree(aq));
        CUDA_CHECK(cudaFree(ad));
        CUDA_CHECK(cudaFree(y));
        CUDA_CHECK(cudaFree(out));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "staged_phases: %s\n", e.what());
        return 1;
    }
    return 0;
}
