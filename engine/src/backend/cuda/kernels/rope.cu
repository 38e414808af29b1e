// rope: NeoX-style rotation of the first n_rot dims of each head (pairs j and j + n_rot/2); one thread per pair.
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/head_math.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace strata::cuda {

namespace {

__global__ void rope_kernel(float* x, int T, int n_heads, int hd, int n_rot, float theta, const int32_t* pos, int pos0) {
    const int half = n_rot / 2;
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * n_heads * half) return;
    const int j = (int)(i % half);
    const size_t th = i / half;                  // t·n_heads + h
    const int t = (int)(th / n_heads);
    float* xh = x + th * hd;
    rope_pair(xh[j], xh[j + half], j, n_rot, theta, pos ? pos[t] : pos0 + t, xh + j, xh + j + half);
}

// rope_kernel with the position of pair j taken from its M-RoPE axis (MODEL.md §4): row 1 (h) when j % 3 == 1 and
// j < 3·sec_h, row 2 (w) when j % 3 == 2 and j < 3·sec_w, else row 0 (t) of pos3 [3, T].
__global__ void rope_multi_kernel(float* x, int T, int n_heads, int hd, int n_rot, float theta, const int32_t* pos3,
                                  int sec_h, int sec_w) {
    const int half = n_rot / 2;
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * n_heads * half) return;
    const int j = (int)(i % half);
    const size_t th = i / half;                  // t·n_heads + h
    const int t = (int)(th / n_heads);
    const int axis = (j % 3 == 1 && j < 3 * sec_h) ? 1 : (j % 3 == 2 && j < 3 * sec_w) ? 2 : 0;
    float* xh = x + th * hd;
    rope_pair(xh[j], xh[j + half], j, n_rot, theta, pos3[(size_t)axis * T + t], xh + j, xh + j + half);
}

}  // namespace

void rope_multi(cudaStream_t s, float* x, int T, int n_heads, int hd, int n_rot, float theta, const int32_t* pos3,
                int sec_h, int sec_w) {
    const size_t total = (size_t)T * n_heads * (n_rot / 2);
    if (!total) return;
    rope_multi_kernel<<<grid_for(total, 128), 128, 0, s>>>(x, T, n_heads, hd, n_rot, theta, pos3, sec_h, sec_w);
    CUDA_CHECK_LAUNCH();
}

void rope(cudaStream_t s, float* x, int T, int n_heads, int hd, int n_rot, float theta, const int32_t* pos, int pos0) {
    const size_t total = (size_t)T * n_heads * (n_rot / 2);
    if (!total) return;
    rope_kernel<<<grid_for(total, 128), 128, 0, s>>>(x, T, n_heads, hd, n_rot, theta, pos, pos0);
    CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
