// Small device helpers shared by the kernels: warp and block reductions, grid sizing.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"

namespace strata::cuda {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();                       // partial may still be read by a previous call
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    float r = lane < nwarps ? partial[lane] : 0.0f;
    return warp_sum(r);
}

inline unsigned grid_for(size_t n, int block) {
    size_t g = (n + block - 1) / block;
    return (unsigned)(g < 1 ? 1 : (g > 0x7fffffff ? 0x7fffffff : g));
}

}  // namespace strata::cuda
