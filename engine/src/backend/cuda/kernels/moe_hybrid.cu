// Kernels of the hybrid MoE path (expert cache on the GPU, misses on the CPU): the gather of the activation rows of
// the cached (token, expert) pairs, the combination of expert outputs that sit in any row order, and the wait for
// the CPU pool's results (a flag in mapped host memory).
#include "backend/cuda/hybrid_moe.h"
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace strata::cuda {

namespace {

constexpr int kThreads = 256;

inline unsigned blocks_for(size_t n) {
    const size_t g = (n + kThreads - 1) / kThreads;
    return (unsigned)(g < 1 ? 1 : (g > 65535 * 16 ? 65535 * 16 : g));
}

__global__ void gather_rows_kernel(const float* x, const int32_t* rows, int n, int width, float* y) {
    const size_t total = (size_t)n * width;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t r = i / width;
        y[i] = x[(size_t)rows[r] * width + i % width];
    }
}

// The same sum as moe_combine_kernel (j ascending), reading pair p's output from row row_of_pair[p].
__global__ void moe_combine_rows_kernel(const float* out, const int32_t* row_of_pair, const float* w, int T, int k,
                                        int H, float* y) {
    const size_t total = (size_t)T * H;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t t = i / H;
        const int c = (int)(i % H);
        float acc = 0.0f;
        for (int j = 0; j < k; ++j) acc += w[t * k + j] * out[(size_t)row_of_pair[t * k + j] * H + c];
        y[i] = acc;
    }
}

// One thread polls the mapped word; the bound keeps a CPU job that never finishes from hanging the device.
__global__ void wait_host_flag_kernel(const volatile uint32_t* flag, uint32_t seq, uint32_t* timed_out) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    while ((int32_t)(*flag - seq) < 0) {
        __nanosleep(500);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - start > 60ull * 1000000000ull) {
            *(volatile uint32_t*)timed_out = 1;
            break;
        }
    }
    __threadfence_system();
}

__global__ void publish_to_host_kernel(const float* x, size_t n, float* y, volatile uint32_t* flag, uint32_t seq) {
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i];
    __threadfence_system();   // this thread's writes reach the host before the flag below
    __syncthreads();
    if (threadIdx.x == 0) *flag = seq;
}

}  // namespace

void publish_to_host(cudaStream_t s, const float* x, size_t n, float* y, uint32_t* flag, uint32_t seq) {
    publish_to_host_kernel<<<1, 1024, 0, s>>>(x, n, y, flag, seq);
    CUDA_CHECK_LAUNCH();
}

void wait_host_flag(cudaStream_t s, const volatile uint32_t* flag, uint32_t seq, uint32_t* timed_out) {
    wait_host_flag_kernel<<<1, 1, 0, s>>>(flag, seq, timed_out);
    CUDA_CHECK_LAUNCH();
}

void gather_rows(cudaStream_t s, const float* x, const int32_t* rows, int n, int width, float* y) {
    if (!n || !width) return;
    gather_rows_kernel<<<blocks_for((size_t)n * width), kThreads, 0, s>>>(x, rows, n, width, y);
    CUDA_CHECK_LAUNCH();
}

void moe_combine_rows(cudaStream_t s, const float* out, const int32_t* row_of_pair, const float* w, int T, int k,
                      int H, float* y) {
    if (!T || !H) return;
    moe_combine_rows_kernel<<<blocks_for((size_t)T * H), kThreads, 0, s>>>(out, row_of_pair, w, T, k, H, y);
    CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
