// F32 / F16 / BF16 weight rows with f32 activations: V consecutive weights a lane and step (load_plain), and one
// row's dot by a whole block (plain_row_dot_block, the split-K matmul's body in matmul.cu).
#pragma once
#include <cstdint>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/quant_formats.cuh"   // half_to_float, bf16_to_float

namespace strata::cuda {

enum PlainType { kF32 = 0, kF16 = 1, kBF16 = 2 };

template <int TY, int V>
__device__ __forceinline__ void load_plain(const uint8_t* wr, int i, float* w) {
    if (TY == kF32) {
        if (V == 4) {
            const float4 f = *(const float4*)(wr + 4 * (size_t)i);
            w[0] = f.x; w[1] = f.y; w[2] = f.z; w[3] = f.w;
        } else {
            w[0] = ((const float*)wr)[i];
        }
    } else {
        uint16_t h[4];
        if (V == 4) {
            const uint2 u = *(const uint2*)(wr + 2 * (size_t)i);
            h[0] = (uint16_t)(u.x & 0xffff); h[1] = (uint16_t)(u.x >> 16);
            h[2] = (uint16_t)(u.y & 0xffff); h[3] = (uint16_t)(u.y >> 16);
        } else {
            h[0] = ((const uint16_t*)wr)[i];
        }
#pragma unroll
        for (int k = 0; k < V; ++k) w[k] = TY == kF16 ? half_to_float(h[k]) : bf16_to_float(h[k]);
    }
}

// Row wr (n weights) · x by a block of WARPS warps: V-wide steps t, t + 32·V·WARPS, … per thread, the warps' sums
// added in warp order; every thread gets the result. A thread issues the loads of up to kPlainBatch steps before its
// first multiply (a row of 2560 is 5 steps: one round trip to memory instead of three); the products are still added
// in step order. r15 on the H200: the F32 router 4.47 -> 4.06 us, BF16 3.96 -> 3.46. Every thread must call this.
// plain_rows_dot_block: the same for T ≤ NT activation rows x [T, n] (a verify window), each weight loaded once and
// each row's sum formed as at T = 1 (the same bits); every thread gets the sums.
constexpr int kPlainBatch = 8;

template <int TY, int V, int WARPS, int NT>
__device__ __forceinline__ void plain_rows_dot_block(const uint8_t* __restrict__ wr, int n,
                                                     const float* __restrict__ x, int T, float (&sum)[NT]) {
    if constexpr (NT == 1) T = 1;
    __shared__ float partial[WARPS][NT];
    constexpr int kStep = V * WARPS * 32;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
    const auto load_x = [&](const float* xt, int i, float (&xv)[V]) {
        if (V == 4) {
            const float4 f = *(const float4*)(xt + i);
            xv[0] = f.x; xv[1 % V] = f.y; xv[2 % V] = f.z; xv[3 % V] = f.w;
        } else {
            xv[0] = xt[i];
        }
    };
    for (int i0 = V * threadIdx.x; i0 < n; i0 += kPlainBatch * kStep) {
        float w[kPlainBatch][V], x1[kPlainBatch][V];   // x1: one row's x, loaded beside w (the one-token order)
#pragma unroll
        for (int b = 0; b < kPlainBatch; ++b) {
            const int i = i0 + b * kStep;
            if (i < n) {   // predicated: every step's loads before the first multiply
                load_plain<TY, V>(wr, i, w[b]);
                if constexpr (NT == 1) load_x(x, i, x1[b]);
            }
        }
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            if (t >= T) break;
            float xv[kPlainBatch][V];
#pragma unroll
            for (int b = 0; b < kPlainBatch; ++b) {
                const int i = i0 + b * kStep;
                if constexpr (NT == 1) {
#pragma unroll
                    for (int k = 0; k < V; ++k) xv[b][k] = x1[b][k];
                } else if (i < n) {
                    load_x(x + (size_t)t * n, i, xv[b]);
                }
            }
#pragma unroll
            for (int b = 0; b < kPlainBatch; ++b) {
                if (i0 + b * kStep >= n) continue;
                if (V == 4) acc[t] = fmaf(w[b][0], xv[b][0], fmaf(w[b][1 % V], xv[b][1 % V], fmaf(w[b][2 % V], xv[b][2 % V],
                                          fmaf(w[b][3 % V], xv[b][3 % V], acc[t]))));
                else acc[t] = fmaf(w[b][0], xv[b][0], acc[t]);
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        const float v = warp_sum(acc[t]);
        if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5][t] = v;
    }
    __syncthreads();
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        sum[t] = 0.0f;
#pragma unroll
        for (int k = 0; k < WARPS; ++k) sum[t] += partial[k][t];
    }
    __syncthreads();   // partial is rewritten by the next call
}

template <int TY, int V, int WARPS>
__device__ __forceinline__ float plain_row_dot_block(const uint8_t* __restrict__ wr, int n,
                                                     const float* __restrict__ x) {
    float sum[1];
    plain_rows_dot_block<TY, V, WARPS, 1>(wr, n, x, 1, sum);
    return sum[0];
}

}  // namespace strata::cuda
