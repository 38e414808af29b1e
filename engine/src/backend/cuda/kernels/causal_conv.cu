// causal_conv: depthwise causal convolution over [history; x] with dilation, then the history moves on by T rows
// (through a scratch copy, since new and old history rows overlap).
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace strata::cuda {

namespace {

// Row r of the timeline [hist (Hh rows); x (T rows)].
__device__ __forceinline__ const float* line_row(const float* hist, const float* x, int Hh, int C, int r) {
    return r < Hh ? hist + (size_t)r * C : x + (size_t)(r - Hh) * C;
}

__global__ void conv_kernel(const float* x, int T, int C, const float* w, int K, int dil, const float* hist, float* y) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C) return;
    const int t = (int)(i / C), c = (int)(i % C);
    const int Hh = (K - 1) * dil;
    float acc = 0.0f;
    for (int j = 0; j < K; ++j) acc += w[(size_t)c * K + j] * line_row(hist, x, Hh, C, Hh + t - (K - 1 - j) * dil)[c];
    y[i] = acc;
}

__global__ void next_hist_kernel(const float* x, int T, int C, int Hh, const float* hist, float* tmp) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)Hh * C) return;
    const int r = (int)(i / C), c = (int)(i % C);
    tmp[i] = line_row(hist, x, Hh, C, T + r)[c];
}

}  // namespace

void causal_conv(cudaStream_t s, const float* x, int T, int C, const float* w, int K, int dil, float* hist, float* tmp,
                 float* y) {
    if (!T || !C) return;
    const int Hh = (K - 1) * dil;
    conv_kernel<<<grid_for((size_t)T * C, 256), 256, 0, s>>>(x, T, C, w, K, dil, hist, y);
    CUDA_CHECK_LAUNCH();
    if (!Hh) return;
    next_hist_kernel<<<grid_for((size_t)Hh * C, 256), 256, 0, s>>>(x, T, C, Hh, hist, tmp);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpyAsync(hist, tmp, (size_t)Hh * C * sizeof(float), cudaMemcpyDeviceToDevice, s));
}

}  // namespace strata::cuda
