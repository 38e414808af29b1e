// Cache writes at positions held on the device, so that a decode pass can be one graph captured once: scatter_rows
// (the KV cache append) and pool_key_blocks (QSA block keys of the blocks the pass completes). Every launch's grid
// depends on T and the shapes only, never on the positions.
#include <algorithm>
#include <cstdint>

#include <cuda_fp16.h>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/head_math.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace strata::cuda {

namespace {

constexpr int kScatterThreads = 256;
constexpr int kMaxPoolDi = 4096;   // pool_key_blocks keeps one row of di floats in shared memory

// One thread per float4 (VEC) or float of the T rows: dst row pos[t] = src row t.
template <bool VEC>
__global__ void scatter_rows_kernel(float* dst, const float* src, int T, int width, const int32_t* pos) {
    const int per_row = VEC ? width / 4 : width;
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * per_row) return;
    const int t = (int)(i / per_row), j = (int)(i % per_row);
    const size_t d = (size_t)pos[t] * width, s = (size_t)t * width;
    if (VEC) reinterpret_cast<float4*>(dst + d)[j] = reinterpret_cast<const float4*>(src + s)[j];
    else dst[d + j] = src[s + j];
}

// One thread per element of the T rows: dst row pos[t] = fp16(src row t).
__global__ void scatter_rows_f16_kernel(uint16_t* dst, const float* src, int T, int width, const int32_t* pos) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * width) return;
    const int t = (int)(i / width), j = (int)(i % width);
    dst[(size_t)pos[t] * width + j] = __half_as_ushort(__float2half_rn(src[(size_t)t * width + j]));
}

// One warp per group of kKvQ8Group values of a row (groups = ⌈width / 64⌉ a row): dst row pos[t] = the q8 format of
// backend/kv_format.h, the same arithmetic as the CPU backend's quantize_kv_q8_row (IEEE divisions, round to even),
// so both write the same bytes. row_bytes: the cache's row stride in bytes.
__global__ void scatter_rows_q8_kernel(uint8_t* dst, const float* src, int T, int width, size_t row_bytes,
                                       const int32_t* pos) {
    const int groups = (width + kKvQ8Group - 1) / kKvQ8Group;
    const size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (w >= (size_t)T * groups) return;
    const int lane = threadIdx.x & 31, t = (int)(w / groups), g = (int)(w % groups);
    const int j0 = g * kKvQ8Group + 2 * lane;
    const float* x = src + (size_t)t * width;
    const float x0 = j0 < width ? x[j0] : 0.0f, x1 = j0 + 1 < width ? x[j0 + 1] : 0.0f;
    float amax = fmaxf(fabsf(x0), fabsf(x1));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const __half dh = __float2half_rn(__fdiv_rn(amax, 127.0f));
    const float d = __half2float(dh);
    auto q = [&](float v) {
        const int i = d > 0.0f ? __float2int_rn(__fdiv_rn(v, d)) : 0;
        return (uint8_t)(int8_t)max(-127, min(127, i));
    };
    uint8_t* row = dst + (size_t)pos[t] * row_bytes;
    if (j0 < width) row[j0] = q(x0);
    if (j0 + 1 < width) row[j0 + 1] = q(x1);
    if (lane == 0) reinterpret_cast<__half*>(row + width)[g] = dh;
}

// The rotation of rope.cu's rope_kernel for dim k of a row y of di at position p (head_math.cuh): NeoX halves on the
// first n_rot dims, the rest unchanged.
__device__ __forceinline__ float rope_dim(const float* y, int k, int n_rot, float theta, int p) {
    const int half = n_rot / 2;
    if (k >= n_rot) return y[k];
    const int j = k < half ? k : k - half;
    float c, s;
    rope_cos_sin(j, n_rot, theta, p, &c, &s);
    return k < half ? rope_lo(y[j], y[j + half], c, s) : rope_hi(y[j], y[j + half], c, s);
}

// One block per token t; tokens that complete no block return at once (the whole block: before any barrier).
// VEC (di % 4 == 0): the mean and the norm as rms_norm.cu's norm_vec_kernel<0, NV> computes one group of di (thread
// i holds float4s i, i + blockDim.x, …; the same launch width), so the sum of squares reduces in the same order;
// otherwise as its norm_kernel<0> (threads_for(di) threads, thread i over columns i, i + blockDim.x, …). The mean of
// each column as mean_rows_kernel (rows summed in order, then / cr).
template <bool VEC, int NV>
__global__ void pool_key_blocks_kernel(const float* kraw, float* kblock, const int32_t* pos, int cr, int di,
                                       const float* norm, int norm_len, float eps, int n_rot, float theta) {
    extern __shared__ float row[];   // [di]: the normed row before RoPE
    const int p = pos[blockIdx.x];
    if (p < 0 || (p + 1) % cr != 0) return;
    const int b = (p + 1) / cr - 1;
    const float* src = kraw + (size_t)b * cr * di;
    float* dst = kblock + (size_t)b * di;
    auto mean = [&](int c) {
        float acc = 0.0f;
        for (int r = 0; r < cr; ++r) acc += src[(size_t)r * di + c];
        return acc / (float)cr;
    };
    if (VEC) {
        const int nv = di / 4;
        float4 v[NV];
#pragma unroll
        for (int i = 0; i < NV; ++i) {
            const int j = threadIdx.x + i * blockDim.x;
            v[i] = j < nv ? make_float4(mean(4 * j), mean(4 * j + 1), mean(4 * j + 2), mean(4 * j + 3))
                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        const float ss = block_sum(sum_squares4(v));
        const float s = 1.0f / sqrtf(ss / di + eps);
#pragma unroll
        for (int i = 0; i < NV; ++i) {
            const int j = threadIdx.x + i * blockDim.x;
            if (j >= nv) break;
            reinterpret_cast<float4*>(row)[j] = scale4(v[i], s, norm, 4 * j, norm_len);
        }
    } else {
        float ss = 0.0f;
        for (int j = threadIdx.x; j < di; j += blockDim.x) {
            const float m = mean(j);
            row[j] = m;
            ss += m * m;
        }
        ss = block_sum(ss);
        const float s = 1.0f / sqrtf(ss / di + eps);
        for (int j = threadIdx.x; j < di; j += blockDim.x) {
            float v = row[j] * s;
            if (norm) v *= norm[j % norm_len];
            row[j] = v;
        }
    }
    __syncthreads();
    for (int k = threadIdx.x; k < di; k += blockDim.x) dst[k] = rope_dim(row, k, n_rot, theta, b * cr);
}

}  // namespace

void scatter_rows(cudaStream_t s, float* dst, const float* src, int T, int width, const int32_t* pos) {
    if (T <= 0 || width <= 0) return;
    const bool vec = width % 4 == 0 && (uintptr_t)dst % 16 == 0 && (uintptr_t)src % 16 == 0;
    const size_t n = (size_t)T * (vec ? width / 4 : width);
    if (vec) scatter_rows_kernel<true><<<grid_for(n, kScatterThreads), kScatterThreads, 0, s>>>(dst, src, T, width, pos);
    else scatter_rows_kernel<false><<<grid_for(n, kScatterThreads), kScatterThreads, 0, s>>>(dst, src, T, width, pos);
    CUDA_CHECK_LAUNCH();
}

void scatter_rows_f16(cudaStream_t s, uint16_t* dst, const float* src, int T, int width, const int32_t* pos) {
    if (T <= 0 || width <= 0) return;
    const size_t n = (size_t)T * width;
    scatter_rows_f16_kernel<<<grid_for(n, kScatterThreads), kScatterThreads, 0, s>>>(dst, src, T, width, pos);
    CUDA_CHECK_LAUNCH();
}

void scatter_rows_q8(cudaStream_t s, uint8_t* dst, const float* src, int T, int width, const int32_t* pos) {
    if (T <= 0 || width <= 0) return;
    STRATA_CHECK(width % 2 == 0, "cuda scatter_rows_q8: rows of an odd width ", width);
    const size_t warps = (size_t)T * kv_q8_groups((size_t)width);
    scatter_rows_q8_kernel<<<grid_for(warps * 32, kScatterThreads), kScatterThreads, 0, s>>>(
        dst, src, T, width, 4 * kv_row_floats(KvType::q8, (size_t)width), pos);
    CUDA_CHECK_LAUNCH();
}

void pool_key_blocks(cudaStream_t s, const float* kraw, float* kblock, const int32_t* pos, int T, int cr, int di,
                     const float* norm, int norm_len, float eps, int n_rot, float theta) {
    STRATA_CHECK(cr > 0, "cuda pool_key_blocks: block size ", cr);
    STRATA_CHECK(di > 0 && di <= kMaxPoolDi, "cuda pool_key_blocks: head dim ", di, " is out of range 1..", kMaxPoolDi);
    STRATA_CHECK(n_rot >= 0 && n_rot % 2 == 0 && n_rot <= di, "cuda pool_key_blocks: ", n_rot, " rotated dims of ", di);
    STRATA_CHECK(!norm || norm_len > 0, "cuda pool_key_blocks: norm of ", norm_len, " values");
    if (T <= 0) return;
    const size_t shmem = (size_t)di * sizeof(float);
    if (di % 4 == 0) {
        // rms_norm.cu's launch_vec for one group of di: threads a multiple of 32 with ≤ 4 float4s each.
        const int nv = di / 4;
        const int threads = std::min(1024, std::max(32, ((nv + 3) / 4 + 31) / 32 * 32));
        const int per = (nv + threads - 1) / threads;
        auto launch = [&](auto kernel) {
            kernel<<<(unsigned)T, threads, shmem, s>>>(kraw, kblock, pos, cr, di, norm, norm_len, eps, n_rot, theta);
        };
        if (per <= 1) launch(pool_key_blocks_kernel<true, 1>);
        else if (per <= 2) launch(pool_key_blocks_kernel<true, 2>);
        else launch(pool_key_blocks_kernel<true, 4>);
    } else {
        const int threads = di <= 64 ? 32 : di <= 256 ? 64 : 128;   // rms_norm.cu's threads_for
        pool_key_blocks_kernel<false, 1><<<(unsigned)T, threads, shmem, s>>>(kraw, kblock, pos, cr, di, norm, norm_len,
                                                                             eps, n_rot, theta);
    }
    CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
