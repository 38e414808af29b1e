// Prompt-sized matmuls on the tensor cores (int8 mma.sync, sm_80+): the tiled kernel's tiles (64 weight rows × TT
// activation rows of one matrix, or of one expert's pairs; matmul_tiled.cu), but each 32-weight chunk is decoded to
// int8 with its scales by QInt<F>::decode (the dp4a kernels' decoder) and multiplied with the Q8 activations by
// mma m16n8k32 (two m16n8k16 where a chunk has two sub-block scales, kSplit). Each chunk's integer sums then give
// chunk_term's float with the same integers and float operations (term below); the terms are added in chunk order.
// On by default on sm_80+ (STRATA_CUDA_MMQ=0: the f32 tiled kernel; 2.6x the prompt speed of that kernel on the H200,
// bench/results/2026-12-05-h200). The index helpers are __host__ __device__:
// dot_host_test emulates a block's tiles with them on the host against the CPU's dots.
#pragma once
#include <cstdint>
#include <cstring>

#include "backend/cuda/kernels/prompt_tile.cuh"
#include "backend/cuda/kernels/quant_dots.cuh"

namespace strata::cuda::mmq {

constexpr int kRows = 64;             // weight rows a block: 4 warps × one m16 tile
constexpr int kThreads = 128;
constexpr int kStep = 64;             // inputs a step: two chunks
constexpr int kChunks = kStep / 32;
constexpr int kStride = kStep + 16;   // bytes a shared row: 20 words, so a fragment load's 8 rows × 4 words
                                      // (word 20·g + t) fall in 32 different banks
static_assert(kThreads == kRows * kChunks, "one thread decodes one chunk of one weight row a step");

// A chunk's weight scales, as chunk_term reads them from IChunk.
struct RowScale {
    float d, dm;
    int s0, s1, m0, m1;
};
// A chunk's activations of one token: the block scale and the sums chunk_term takes (Σ of the 32; of each 16).
struct TokInfo {
    float da;
    int sum, sum0, sum1;
};

SD uint32_t ld_word(const uint8_t* p) {
#ifdef __CUDA_ARCH__
    return *reinterpret_cast<const uint32_t*>(p);
#else
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
#endif
}

// mma m16n8k32 .s8 fragments (PTX ISA, "Matrix Fragments for mma.m16n8k32"), g = lane / 4, t = lane % 4:
//   A (16 × 32, row-major): a0 row g, k 4t … 4t+3 | a1 row g+8 | a2 row g, k 16+4t … | a3 row g+8, k 16+4t …
//   B (32 × 8, column n = a token): b0 column g, k 4t … 4t+3 | b1 column g, k 16+4t …
//   C (16 × 8, s32): c0, c1 row g, columns 2t, 2t+1 | c2, c3 row g+8
// m16n8k16 .s8 takes (a0, a1) and b0 of the same layout over k 0 … 15, so (a2, a3) and b1 are a chunk's upper half.
// ws: weight rows of kStride bytes (chunk c at byte 32c); xs: token rows likewise.
SD void load_a(const uint8_t* ws, int r0, int c, int lane, uint32_t (&a)[4]) {
    const uint8_t* p = ws + (r0 + (lane >> 2)) * kStride + 32 * c + 4 * (lane & 3);
    a[0] = ld_word(p);
    a[1] = ld_word(p + 8 * kStride);
    a[2] = ld_word(p + 16);
    a[3] = ld_word(p + 8 * kStride + 16);
}
SD void load_b(const uint8_t* xs, int t0, int c, int lane, uint32_t (&b)[2]) {
    const uint8_t* p = xs + (t0 + (lane >> 2)) * kStride + 32 * c + 4 * (lane & 3);
    b[0] = ld_word(p);
    b[1] = ld_word(p + 16);
}
SD int c_row(int lane, int i) { return (lane >> 2) + 8 * (i >> 1); }
SD int c_col(int lane, int i) { return 2 * (lane & 3) + (i & 1); }

// Chunk u of a weight row (null: a row past the matrix, zeros) into its shared row (32 bytes) and scales. Formats with
// a cheaper decode in a permuted order (kActPerm: Q2_0) stage that order, and their activations are staged permuted the
// same way (stage_act_chunk<true>): a dot over the chunk does not depend on the order, so the sums are the same.
template <class F>
SD void stage_weight_chunk(const uint8_t* row, int u, const void* grid, uint8_t* dst, RowScale& sc) {
    constexpr int kSub = F::QK / 32;
    IChunk ch{};
    if (row) {
        if constexpr (QInt<F>::kActPerm) QInt<F>::decode_perm(row + (size_t)(u / kSub) * F::BYTES, u % kSub, grid, ch);
        else QInt<F>::decode(row + (size_t)(u / kSub) * F::BYTES, u % kSub, grid, ch);
    }
#ifdef __CUDA_ARCH__
    uint4* d4 = reinterpret_cast<uint4*>(dst);
    d4[0] = make_uint4((uint32_t)ch.w[0], (uint32_t)ch.w[1], (uint32_t)ch.w[2], (uint32_t)ch.w[3]);
    d4[1] = make_uint4((uint32_t)ch.w[4], (uint32_t)ch.w[5], (uint32_t)ch.w[6], (uint32_t)ch.w[7]);
#else
    std::memcpy(dst, ch.w, 32);
#endif
    sc = RowScale{ch.d, ch.dm, ch.s0, ch.s1, ch.m0, ch.m1};
}

// A token's 32 Q8 activations (null: a tile row past the pairs, zeros) with their block scale into its shared row;
// PERM: each 16 in permute_act16's order (the weights' of a kActPerm format). Its sums do not depend on the order.
template <bool PERM>
SD void stage_act_chunk(const int8_t* a, float da, uint8_t* dst, TokInfo& info) {
    int w[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (a) {
#ifdef __CUDA_ARCH__
        const int4 lo = reinterpret_cast<const int4*>(a)[0], hi = reinterpret_cast<const int4*>(a)[1];
        w[0] = lo.x; w[1] = lo.y; w[2] = lo.z; w[3] = lo.w;
        w[4] = hi.x; w[5] = hi.y; w[6] = hi.z; w[7] = hi.w;
#else
        std::memcpy(w, a, 32);
#endif
    }
    if constexpr (PERM) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            uint32_t g[4] = {(uint32_t)w[4 * h], (uint32_t)w[4 * h + 1], (uint32_t)w[4 * h + 2], (uint32_t)w[4 * h + 3]};
            permute_act16(g);
#pragma unroll
            for (int i = 0; i < 4; ++i) w[4 * h + i] = (int)g[i];
        }
    }
#ifdef __CUDA_ARCH__
    uint4* d4 = reinterpret_cast<uint4*>(dst);
    d4[0] = make_uint4((uint32_t)w[0], (uint32_t)w[1], (uint32_t)w[2], (uint32_t)w[3]);
    d4[1] = make_uint4((uint32_t)w[4], (uint32_t)w[5], (uint32_t)w[6], (uint32_t)w[7]);
#else
    std::memcpy(dst, w, 32);
#endif
    info.da = a ? da : 0.0f;
    info.sum0 = act_sum4(w, 0);
    info.sum1 = act_sum4(w, 4);
    info.sum = act_sum(w);
}

// chunk_term<Q> from the chunk's integer sums: s_lo = Σ w·a over the chunk (kSplit: over its first 16), s_hi = the
// second 16's (kSplit only). The same integers and float operations as chunk_term, so the same float.
template <class Q>
SD float term(int s_lo, int s_hi, const RowScale& w, const TokInfo& x) {
    int sq = Q::kSplit ? w.s0 * s_lo + w.s1 * s_hi : w.s0 * s_lo;
    if constexpr (Q::kOffset != 0) sq -= Q::kOffset * x.sum;
    float r = x.da * (w.d * (float)sq);
    if constexpr (Q::kMin) {
        const int sm = Q::kSplit ? w.m0 * x.sum0 + w.m1 * x.sum1 : w.m0 * x.sum;
        r -= x.da * (w.dm * (float)sm);
    }
    return r;
}

// Formats whose 8 chunks of a 256-weight super-block share its float scales (d, dm: the K-quants and the 256-weight
// i-quants) against Q8_K activations (one scale a 256): a chunk's integers (chunk_term's sq and sm) can be summed over
// the super-block and turned into a float once, as quant/dot_scalar.cpp's K-quant dots do (STRATA_CUDA_MMQ_SUPER=0:
// per chunk). |Σ| < 2^31: 8 chunks of 32 products, |s·w| ≤ 4,064 (Q6_K, IQ4_XS) and |a| ≤ 127.
template <class F>
constexpr bool kSuperInt = F::QK == 256 && F::ABLK == 256 && QInt<F>::kOffset == 0;

template <class Q>
SD void add_chunk_ints(int s_lo, int s_hi, const RowScale& w, const TokInfo& x, int& isum, int& imin) {
    isum += Q::kSplit ? w.s0 * s_lo + w.s1 * s_hi : w.s0 * s_lo;
    if constexpr (Q::kMin) imin += Q::kSplit ? w.m0 * x.sum0 + w.m1 * x.sum1 : w.m0 * x.sum;
}
template <class Q>
SD float super_term(int isum, int imin, const RowScale& w, const TokInfo& x) {
    float r = x.da * (w.d * (float)isum);
    if constexpr (Q::kMin) r -= x.da * (w.dm * (float)imin);
    return r;
}

#ifdef __CUDACC__
__device__ __forceinline__ void mma_k32(int (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
__device__ __forceinline__ void mma_k16(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b));
#endif
}

// y[p, row] for the TT activation rows of this block's tile and weight rows r0 … r0 + 63 (tile as in
// matmul_tiled_kernel: items[blockIdx.y] for experts, else rows blockIdx.y·TT … of P). Q8 activations aq / ad
// (blocks of ablk); n a multiple of kStep. Warp w computes weight rows 16w … 16w + 15 against every tile row.
template <class F, int TT, bool SUPER>
__global__ void __launch_bounds__(kThreads)
matmul_mmq_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t rows, int n, size_t mat_stride,
                  int act_div, const int8_t* __restrict__ aq, const float* __restrict__ ad, int ablk, int P,
                  const int32_t* __restrict__ order, const int4* __restrict__ items,
                  const int32_t* __restrict__ n_items, float* __restrict__ y) {
    using Q = QInt<F>;
    static_assert(!SUPER || kSuperInt<F>, "super-block sums only for the formats that allow them");
    constexpr int NJ = TT / 8;   // n8 tiles of tokens
    static_assert(TT % 8 == 0 && TT <= kThreads, "a tile of whole n8 tiles");
    __shared__ __align__(16) uint8_t ws[kRows * kStride];
    __shared__ __align__(16) uint8_t xs[TT * kStride];
    __shared__ RowScale wsc[kChunks][kRows];
    __shared__ TokInfo xinfo[kChunks][TT];
    __shared__ int arow[TT], prow[TT];
    __shared__ uint4 grid_smem[GridSmem<F>::kWords];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const uint8_t* wm = prompt_tile_rows<TT>(W, mat_stride, act_div, P, order, items, n_items, arow, prow);
    if (!wm) return;
    const int64_t r0 = (int64_t)blockIdx.x * kRows;
    const void* grid = stage_grid<F>(grid_smem);   // the i-quants' table, read by every decode
    __syncthreads();                               // (also the tile rows; stage_grid syncs only with a table)

    const int nd = n / ablk;
    float acc[NJ][4];
    int isum[NJ][4], imin[NJ][4];   // SUPER: the super-block's integers so far
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            acc[j][i] = 0.0f;
            isum[j][i] = imin[j][i] = 0;
        }

    for (int k0 = 0; k0 < n; k0 += kStep) {
        {   // thread → (weight row tid % 64, chunk tid / 64)
            const int r = tid & (kRows - 1), c = tid / kRows;
            const int64_t row = r0 + r;
            stage_weight_chunk<F>(row < rows ? wm + (size_t)row * row_bytes : nullptr, k0 / 32 + c, grid,
                                  ws + r * kStride + 32 * c, wsc[c][r]);
        }
        for (int i = tid; i < TT * kChunks; i += kThreads) {
            const int t = i / kChunks, c = i % kChunks, a = arow[t], k = k0 + 32 * c;
            stage_act_chunk<Q::kActPerm>(a >= 0 ? aq + (size_t)a * n + k : nullptr,
                                         a >= 0 ? ad[(size_t)a * nd + k / ablk] : 0.0f,
                            xs + t * kStride + 32 * c, xinfo[c][t]);
        }
        __syncthreads();
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
            uint32_t a[4];
            load_a(ws, 16 * warp, c, lane, a);
            const RowScale rs[2] = {wsc[c][16 * warp + c_row(lane, 0)], wsc[c][16 * warp + c_row(lane, 2)]};
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
                uint32_t b[2];
                load_b(xs, 8 * j, c, lane, b);
                int lo[4] = {0, 0, 0, 0}, hi[4] = {0, 0, 0, 0};
                if constexpr (Q::kSplit) {
                    mma_k16(lo, a[0], a[1], b[0]);
                    mma_k16(hi, a[2], a[3], b[1]);
                } else {
                    mma_k32(lo, a, b);
                }
                const TokInfo x[2] = {xinfo[c][8 * j + c_col(lane, 0)], xinfo[c][8 * j + c_col(lane, 1)]};
                if constexpr (SUPER) {
                    const bool last = (k0 / 32 + c) % 8 == 7;   // the super-block's last chunk
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        add_chunk_ints<Q>(lo[i], hi[i], rs[i >> 1], x[i & 1], isum[j][i], imin[j][i]);
                        if (last) {
                            acc[j][i] += super_term<Q>(isum[j][i], imin[j][i], rs[i >> 1], x[i & 1]);
                            isum[j][i] = imin[j][i] = 0;
                        }
                    }
                } else {
#pragma unroll
                    for (int i = 0; i < 4; ++i) acc[j][i] += term<Q>(lo[i], hi[i], rs[i >> 1], x[i & 1]);
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int p = prow[8 * j + c_col(lane, i)];
            const int64_t row = r0 + 16 * warp + c_row(lane, i);
            if (p >= 0 && row < rows) y[(size_t)p * rows + row] = acc[j][i];
        }
}
#endif   // __CUDACC__

}  // namespace strata::cuda::mmq
