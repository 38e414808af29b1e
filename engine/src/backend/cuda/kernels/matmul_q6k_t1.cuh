// The Q6_K matmul at one activation row and many output rows: the output head (2560 -> 248320, ~520 MB read once a
// decode pass). Included by matmul.cu only.
//
// Why a kernel of its own: in matmul_q8_kernel every lane loads its 32-weight chunk's words from global memory, ~20
// word loads a chunk whose lanes touch lines of four super-blocks each: the head ran L1-bound at ~2 TB/s (264 µs,
// 2026-12-02-h200-kernels). Here each warp copies 4 whole rows (4 x 2,100 contiguous bytes for n = 2560) into shared
// memory with 16-byte cp.async copies, the next 4 rows' copy in flight while it decodes these, and each lane takes
// 64-weight pairs of chunks (chunks r and r + 2 of a 128-weight half share their ql and qh bytes), so a chunk costs
// about a third of the loads. Each chunk's term is chunk_term's (the same float terms as the general kernel); a row's
// pair sums are added in pair order.
#pragma once
#include <cstdint>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/matmul_q8.cuh"
#include "backend/cuda/kernels/quant_dots.cuh"

namespace strata::cuda::q8 {

constexpr int kQ6Rows = 4;   // rows a warp stages at once: 4 x 40 pairs = 5 pairs a lane at n = 2560

// Shared memory of the kernel for T activation rows: the rows (T · n int8, then T · n / 256 scales: the layout of
// quantize_rows_to_smem) rounded to 16 bytes, then per warp two row-group buffers and the pair sums of one group for
// each of T rows.
__host__ __device__ inline size_t q6k_act_bytes(int n, int T = 1) {
    return ((size_t)T * n + (size_t)T * (n / 256) * 4 + 15) / 16 * 16;
}
__host__ __device__ inline size_t q6k_warp_bytes(size_t row_bytes, int n, int T = 1) {
    return 2 * kQ6Rows * row_bytes + (size_t)T * kQ6Rows * (n / 64) * sizeof(float);
}
inline size_t q6k_t1_smem_bytes(int n, size_t row_bytes, int T = 1) {
    return q6k_act_bytes(n, T) + (size_t)kWarps * q6k_warp_bytes(row_bytes, n, T);
}

// y[t, row] = W[row] · x[t] for rows a multiple of kQ6Rows, kQ6Rows · row_bytes a multiple of 16, W 16-byte aligned
// (the launcher checks), T ≤ NT rows of x (NT > 1: a verify window, each chunk decoded once for every row and each
// row's sum formed as at T = 1). FQ: the block quantizes x itself (quantize_rows_to_smem, the bits of quantize_act);
// otherwise it copies aq / ad.
template <bool FQ, int NT = 1>
__global__ void __launch_bounds__(kWarps * 32)
matmul_q6k_t1_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t rows, int n,
                     const int8_t* __restrict__ aq, const float* __restrict__ ad, const float* __restrict__ x, int T,
                     float* __restrict__ y) {
    using Q = QInt<FmtQ6_K>;
    extern __shared__ uint4 act_smem[];   // the same base as quantize_rows_to_smem's
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int pairs = n / 64;   // 64-weight pairs a row
    const size_t group_bytes = kQ6Rows * row_bytes;
    uint8_t* wbuf = (uint8_t*)act_smem + q6k_act_bytes(n, T) + (size_t)warp * q6k_warp_bytes(row_bytes, n, T);
    float* red = (float*)(wbuf + 2 * group_bytes);   // [T, kQ6Rows · pairs]
    const int64_t groups = rows / kQ6Rows, stride = (int64_t)gridDim.x * kWarps;
    int64_t g = (int64_t)blockIdx.x * kWarps + warp;

    auto issue = [&](int64_t grp, int buf) {   // one commit group a call, every lane
        const uint4* src = (const uint4*)(W + (size_t)grp * group_bytes);
        uint4* dst = (uint4*)(wbuf + (size_t)buf * group_bytes);
        const int words = (int)(group_bytes / 16);
        for (int i = lane; i < words; i += 32) cp_async16(dst + i, src + i);
        cp_async_commit();
    };
    if (g < groups) issue(g, 0);   // the first rows travel while the activations are prepared

    const int8_t* sq;
    const float* sd;
    if constexpr (FQ) {
        quantize_rows_to_smem<256>(x, n, 0, T - 1, sq, sd);   // ends with the block synchronised
    } else {
        int8_t* q = (int8_t*)act_smem;
        float* d = (float*)(q + (size_t)T * n);
        for (int i = threadIdx.x; i < T * n / 16; i += blockDim.x) ((uint4*)q)[i] = __ldg((const uint4*)aq + i);
        for (int i = threadIdx.x; i < T * (n / 256); i += blockDim.x) d[i] = __ldg(ad + i);
        __syncthreads();
        sq = q;
        sd = d;
    }
    const int group_pairs = kQ6Rows * pairs;

    for (int cur = 0; g < groups; g += stride, cur ^= 1) {
        const bool more = g + stride < groups;
        if (more) {
            issue(g + stride, cur ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncwarp();   // every lane's copies of this group have landed
        const uint8_t* buf = wbuf + (size_t)cur * group_bytes;
        for (int q = lane; q < kQ6Rows * pairs; q += 32) {
            const int row = q / pairs, p = q % pairs;
            const int sb = p / 4, h = (p / 2) & 1, rr = p & 1;   // super-block, 128-weight half, chunk r = rr or rr + 2
            const uint8_t* b = buf + (size_t)row * row_bytes + (size_t)sb * FmtQ6_K::BYTES;
            uint32_t ql[8], qh[8];
            load_words<8>(b + h * 64 + rr * 32, ql);
            load_words<8>(b + 128 + h * 32, qh);
            const float d = half_to_float(ld16(b + 208));
            float sum[NT];
#pragma unroll
            for (int t = 0; t < NT; ++t) sum[t] = 0.0f;
#pragma unroll
            for (int k = 0; k < 2; ++k) {   // chunk r = rr + 2k: the low (k = 0) or high nibbles of ql
                const int r = rr + 2 * k, sub = 4 * h + r;
                IChunk c;
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const uint32_t lo = (ql[i] >> (4 * k)) & 0x0F0F0F0Fu;
                    const uint32_t hi = ((qh[i] >> (2 * r)) & 0x03030303u) << 4;
                    c.w[i] = sub_bytes(lo | hi, 0x20202020u);
                }
                const uint16_t sc = ld16(b + 192 + 2 * sub);
                c.s0 = (int8_t)(sc & 0xFF);
                c.s1 = (int8_t)(sc >> 8);
                c.d = d;
#pragma unroll
                for (int t = 0; t < NT; ++t) {
                    if (t >= T) break;
                    const int4* q4 = (const int4*)(sq + (size_t)t * n + (size_t)sb * 256 + 32 * sub);
                    const int4 lo4 = q4[0], hi4 = q4[1];
                    const int a[8] = {lo4.x, lo4.y, lo4.z, lo4.w, hi4.x, hi4.y, hi4.z, hi4.w};
                    sum[t] += chunk_term<Q>(c, a, sd[t * (n / 256) + sb]);
                }
            }
#pragma unroll
            for (int t = 0; t < NT; ++t)
                if (t < T) red[t * group_pairs + q] = sum[t];
        }
        __syncwarp();
        if (lane < kQ6Rows * T) {
            const int t = lane / kQ6Rows, row = lane % kQ6Rows;
            float s = 0.0f;
            for (int p = 0; p < pairs; ++p) s += red[t * group_pairs + row * pairs + p];
            y[(size_t)t * rows + g * kQ6Rows + row] = s;
        }
        __syncwarp();   // red and this buffer are rewritten two groups on
    }
}

}  // namespace strata::cuda::q8
