// Hyper-connection read mix and write (hyper_mix, hyper_inject) and the PLE gate (ple_gate), which shares their
// [T, n·H] stream layout. hyper_inject moves float4s where H % 4 == 0.
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/kernels/t1_variants.h"

namespace strata::cuda {

namespace {

__global__ void hyper_mix_kernel(const float* xn, const float* m, int T, int n, int H, float* u) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * H) return;
    const size_t t = i / H;
    const int j = (int)(i % H);
    float acc = 0.0f;
    for (int s = 0; s < n; ++s) {
        const size_t k = t * n * H + (size_t)s * H + j;
        acc += m[k] * xn[k];
    }
    u[i] = acc / (float)n;
}

__global__ void hyper_inject_kernel(float* X, const float* inj, const float* y, int T, int n, int H) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * n * H) return;
    const size_t ts = i / H;            // t·n + s
    const size_t t = ts / n;
    const int j = (int)(i % H);
    X[i] = fmaf(inj[ts], y[t * H + j], X[i]);   // the same fmaf as hyper_read.cu's folded injection
}

// The same four columns at a time (H % 4 == 0): i indexes float4s of X.
__global__ void hyper_inject4_kernel(float4* X, const float* inj, const float4* y, int T, int n, int H4) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * n * H4) return;
    const size_t ts = i / H4, t = ts / n;
    const int j = (int)(i % H4);
    const float a = inj[ts];
    const float4 v = y[t * H4 + j];
    float4 x = X[i];
    x.x = fmaf(a, v.x, x.x);
    x.y = fmaf(a, v.y, x.y);
    x.z = fmaf(a, v.z, x.z);
    x.w = fmaf(a, v.w, x.w);
    X[i] = x;
}

// One block per (t, s).
__global__ void ple_gate_kernel(const float* K, const float* Q, const float* v, int n, int H, float* gv) {
    const size_t ts = blockIdx.x, t = ts / n;
    const float* ks = K + ts * H;
    const float* qs = Q + ts * H;
    float d = 0.0f;
    for (int j = threadIdx.x; j < H; j += blockDim.x) d += ks[j] * qs[j];
    d = block_sum(d) * (1.0f / sqrtf((float)H));
    const float sign = d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : 0.0f);
    const float gamma = sign * sqrtf(fmaxf(fabsf(d), 1e-6f));
    const float g = 1.0f / (1.0f + expf(-gamma));
    for (int j = threadIdx.x; j < H; j += blockDim.x) gv[ts * H + j] = g * v[t * H + j];
}

}  // namespace

void hyper_mix(cudaStream_t s, const float* xn, const float* m, int T, int n, int H, float* u) {
    const size_t total = (size_t)T * H;
    if (!total) return;
    hyper_mix_kernel<<<grid_for(total, 256), 256, 0, s>>>(xn, m, T, n, H, u);
    CUDA_CHECK_LAUNCH();
}

void hyper_inject_v1(cudaStream_t s, float* X, const float* inj, const float* y, int T, int n, int H) {
    const size_t total = (size_t)T * n * H;
    if (!total) return;
    hyper_inject_kernel<<<grid_for(total, 256), 256, 0, s>>>(X, inj, y, T, n, H);
    CUDA_CHECK_LAUNCH();
}

void hyper_inject(cudaStream_t s, float* X, const float* inj, const float* y, int T, int n, int H) {
    const size_t total = (size_t)T * n * H;
    if (!total) return;
    if (H % 4 == 0 && (uintptr_t)X % 16 == 0 && (uintptr_t)y % 16 == 0) {
        const size_t total4 = total / 4;
        hyper_inject4_kernel<<<grid_for(total4, 128), 128, 0, s>>>((float4*)X, inj, (const float4*)y, T, n, H / 4);
        CUDA_CHECK_LAUNCH();
        return;
    }
    hyper_inject_kernel<<<grid_for(total, 256), 256, 0, s>>>(X, inj, y, T, n, H);
    CUDA_CHECK_LAUNCH();
}

void ple_gate(cudaStream_t s, const float* K, const float* Q, const float* v, int T, int n, int H, float* gv) {
    if (!T || !n) return;
    ple_gate_kernel<<<(unsigned)(T * n), 128, 0, s>>>(K, Q, v, n, H, gv);
    CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
