// The matmul kernels for Q8-quantized activations (included by matmul.cu only): decode (one row per warp), several
// activation rows on one matrix (4 rows per warp), and expert matrices by id (pairs sharing an expert grouped).
// Each chunk is decoded once by quant_dots.cuh and dotted with every activation row it serves.
#pragma once
#include <cstdint>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/quant_dots.cuh"

namespace strata::cuda::q8 {

constexpr int kWarps = 4;   // warps per block; the launchers in matmul.cu use the same

// One block of BLK activations quantized by one warp, lane l holding values l, l + 32, ... in v: quantize_act's
// kernel and the fused-quantization matmuls both call this, so their int8 values and scales are the same bits.
template <int BLK>
__device__ __forceinline__ void quantize_act_values(const float (&v)[BLK / 32], int lane, int8_t* qb, float* d) {
    const float scale = quantize_act_block<BLK>(v, lane, qb);
    if (lane == 0) *d = scale;
}

template <int BLK>
__device__ __forceinline__ void load_act_values(const float* __restrict__ xb, int lane, float (&v)[BLK / 32]) {
#pragma unroll
    for (int k = 0; k < BLK / 32; ++k) v[k] = xb[lane + 32 * k];
}

// Fused quantization (FQ kernels): the block quantizes activation rows [a0, a1] of x (f32, n per row, rows
// contiguous) into dynamic shared memory, int8 rows first (16-byte aligned as n % 32 == 0), then the scales;
// returns the rows' base pointers through aq / ad (local row 0 = a0). Each warp loads 512 values (16 per lane:
// 16 Q8_0 or 2 Q8_K blocks) before reducing, so the loads overlap: one round for a row of 2048 with 4 warps.
// Every thread of the block must call this.
template <int BLK>
__device__ __forceinline__ void quantize_rows_to_smem(const float* __restrict__ x, int n, int a0, int a1,
                                                      const int8_t* __restrict__& aq, const float* __restrict__& ad) {
    extern __shared__ uint4 act_smem[];
    constexpr int kBatch = 512 / BLK;
    int8_t* q = (int8_t*)act_smem;
    const int rows = a1 - a0 + 1;
    float* d = (float*)(q + (size_t)rows * n);
    const int blocks = rows * (n / BLK), lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const float* xs = x + (size_t)a0 * n;
    for (int b0 = (threadIdx.x >> 5) * kBatch; b0 < blocks; b0 += warps * kBatch) {
        float v[kBatch][BLK / 32];
#pragma unroll
        for (int i = 0; i < kBatch; ++i)
            if (b0 + i < blocks) load_act_values<BLK>(xs + (size_t)(b0 + i) * BLK, lane, v[i]);
#pragma unroll
        for (int i = 0; i < kBatch; ++i)   // b0 + i is the same for the whole warp, as warp_max needs
            if (b0 + i < blocks) quantize_act_values<BLK>(v[i], lane, q + (size_t)(b0 + i) * BLK, d + b0 + i);
    }
    __syncthreads();
    aq = q;
    ad = d;
}

// One row of x (n values, n % 32 == 0) quantized in Q8_0 blocks into shared memory by one thread a block (its 32
// values as float4s, no shuffles: for blocks of many warps), quantize_act_block<32>'s arithmetic (the same bits):
// int8 values at q (PERM: each 16 in permute_act16's order), scales at d and, with sums, each block's Σ of its int8
// values. The caller synchronises the block before reading them.
template <bool PERM>
__device__ __forceinline__ void quantize_row32_to_smem(const float* __restrict__ x, int n, int8_t* q, float* d,
                                                       int* sums) {
    for (int b = threadIdx.x; b < n / 32; b += blockDim.x) {
        float4 v[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = ((const float4*)(x + 32 * b))[i];
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i)
            amax = fmaxf(amax, fmaxf(fmaxf(fabsf(v[i].x), fabsf(v[i].y)), fmaxf(fabsf(v[i].z), fabsf(v[i].w))));
        const float dd = amax / 127.0f;
        const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
        uint32_t w[8];
        int sum = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float f[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
            uint32_t word = 0;
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int r = (int)rintf(f[k] * id);
                sum += r;
                word |= (uint32_t)(uint8_t)(int8_t)r << (8 * k);
            }
            w[i] = word;
        }
        if constexpr (PERM) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                uint32_t g[4] = {w[4 * h], w[4 * h + 1], w[4 * h + 2], w[4 * h + 3]};
                permute_act16(g);
#pragma unroll
                for (int k = 0; k < 4; ++k) w[4 * h + k] = g[k];
            }
        }
        uint4* qo = (uint4*)(q + 32 * b);
        qo[0] = make_uint4(w[0], w[1], w[2], w[3]);
        qo[1] = make_uint4(w[4], w[5], w[6], w[7]);
        d[b] = __half2float(__float2half_rn(dd));
        if (sums) sums[b] = sum;
    }
}

// Dynamic shared memory bytes of quantize_rows_to_smem for `rows` rows of n values in blocks of blk.
inline size_t fused_act_bytes(int rows, int n, int blk) {
    return (size_t)rows * n + (size_t)rows * (n / blk) * sizeof(float);
}

// Activation loads: read-only cache for global memory, plain loads for the fused kernels' shared memory.
template <bool FQ>
__device__ __forceinline__ int4 load_act4(const int4* p) {
    if constexpr (FQ) return *p;
    else return __ldg(p);
}
template <bool FQ>
__device__ __forceinline__ float load_act_scale(const float* p) {
    if constexpr (FQ) return *p;
    else return __ldg(p);
}

// acc[t] += row · activation row arow[t] for t < cnt: lane l takes chunks l, l+32, …; each chunk's weights are
// decoded once for all cnt rows.
template <class F, int NT, bool FQ = false>
__device__ __forceinline__ void row_dot_q8(const uint8_t* __restrict__ wr, int n, const void* grid,
                                           const int8_t* __restrict__ aq, const float* __restrict__ ad,
                                           const int (&arow)[NT], int cnt, float (&acc)[NT]) {
    constexpr int kSub = F::QK / 32;
    const int units = n / 32, nd = n / F::ABLK;
#pragma unroll 2
    for (int u = threadIdx.x & 31; u < units; u += 32) {
        const auto act = [&](int t, int (&a)[8]) -> float {
            const int4* q4 = (const int4*)(aq + (size_t)arow[t] * n + 32 * u);
            const int4 lo = load_act4<FQ>(q4), hi = load_act4<FQ>(q4 + 1);
            a[0] = lo.x; a[1] = lo.y; a[2] = lo.z; a[3] = lo.w;
            a[4] = hi.x; a[5] = hi.y; a[6] = hi.z; a[7] = hi.w;
            return load_act_scale<FQ>(ad + (size_t)arow[t] * nd + (32 * u) / F::ABLK);
        };
        QDot<F>::template dot<NT>(wr + (size_t)(u / kSub) * F::BYTES, u % kSub, grid, act, cnt, acc);
    }
}

// One matrix: y[p, row] for p in [p0, p0 + NT), activation row p / act_div. Each warp takes rows warp, warp +
// (all warps of the grid), … so a block stages the grid table once for many rows.
// FQ: aq / ad are ignored and the block quantizes the rows it reads from x itself (quantize_rows_to_smem).
template <class F, int NT, bool FQ = false>
__global__ void __launch_bounds__(kWarps * 32)
matmul_q8_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t rows, int n, int act_div,
                 const int8_t* __restrict__ aq, const float* __restrict__ ad, const float* __restrict__ x, int P,
                 float* __restrict__ y) {
    __shared__ uint4 smem[GridSmem<F>::kWords];
    const void* grid = stage_grid<F>(smem);
    const int p0 = blockIdx.y * NT;
    const int cnt = min(NT, P - p0);
    const int a0 = FQ ? p0 / act_div : 0;
    if constexpr (FQ) quantize_rows_to_smem<F::ABLK>(x, n, a0, (p0 + cnt - 1) / act_div, aq, ad);
    int arow[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) arow[t] = t < cnt ? (p0 + t) / act_div - a0 : 0;
    for (int64_t row = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5); row < rows; row += (int64_t)gridDim.x * kWarps) {
        float acc[NT];
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
        row_dot_q8<F, NT, FQ>(W + (size_t)row * row_bytes, n, grid, aq, ad, arow, cnt, acc);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const float v = warp_sum(acc[t]);
            if ((threadIdx.x & 31) == 0 && t < cnt) y[(size_t)(p0 + t) * rows + row] = v;
        }
    }
}

// One activation row and few output rows (narrow outputs, e.g. hc_down 10240 -> 320, ssm_out 6144 -> 2560): one
// row per block, the block's threads take the row's chunks t, t + 128, … (split-K over its 4 warps, so a short row
// count still fills the GPU), the warps' sums added in warp order (deterministic). Rows looped over the grid.
// NT > 1: up to NT activation rows (T of them, a verify window), each chunk decoded once for all; every token's sum
// is formed as at T = 1 (the same bits). FQ: the block quantizes x (T rows) into shared memory first.
// WARPS: 2 where the rows outnumber the 4-warp blocks that fit at once (the GDN out projection's 2,560 rows against
// 16 blocks an SM: a second wave), 4 otherwise.
template <class F, bool FQ = false, int WARPS = kWarps, int NT = 1>
__global__ void __launch_bounds__(WARPS * 32)
matmul_q8_splitk_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t rows, int n,
                        const int8_t* __restrict__ aq, const float* __restrict__ ad, const float* __restrict__ x, int T,
                        float* __restrict__ y) {
    if constexpr (NT == 1) T = 1;   // a constant: the one-token instance compiles as before windows existed
    __shared__ uint4 smem[GridSmem<F>::kWords];
    __shared__ float partial[WARPS][NT];
    pdl_launch_dependents();
    if (blockIdx.x < rows) prefetch_l2_lines(W + (size_t)blockIdx.x * row_bytes, row_bytes, threadIdx.x, blockDim.x);
    const void* grid = stage_grid<F>(smem);
    pdl_wait();
    aq = pdl_dep(aq);
    ad = pdl_dep(ad);
    x = pdl_dep(x);
    if constexpr (FQ) quantize_rows_to_smem<F::ABLK>(x, n, 0, T - 1, aq, ad);
    constexpr int kSub = F::QK / 32;
    const int units = n / 32, nd = n / F::ABLK;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const uint8_t* wr = W + (size_t)row * row_bytes;
        float acc[NT];
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
#pragma unroll 2
        for (int u = threadIdx.x; u < units; u += WARPS * 32) {
            const auto act = [&](int t, int (&a)[8]) -> float {
                const int4* q4 = (const int4*)(aq + (size_t)t * n + 32 * u);
                const int4 lo = load_act4<FQ>(q4), hi = load_act4<FQ>(q4 + 1);
                a[0] = lo.x; a[1] = lo.y; a[2] = lo.z; a[3] = lo.w;
                a[4] = hi.x; a[5] = hi.y; a[6] = hi.z; a[7] = hi.w;
                return load_act_scale<FQ>(ad + (size_t)t * nd + (32 * u) / F::ABLK);
            };
            QDot<F>::template dot<NT>(wr + (size_t)(u / kSub) * F::BYTES, u % kSub, grid, act, T, acc);
        }
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const float v = warp_sum(acc[t]);
            if ((threadIdx.x & 31) == 0 && t < T) partial[threadIdx.x >> 5][t] = v;
        }
        __syncthreads();
        if (threadIdx.x < T) {
            const int t = threadIdx.x;
            float sum = 0.0f;
#pragma unroll
            for (int w = 0; w < WARPS; ++w) sum += partial[w][t];
            y[(size_t)t * rows + row] = sum;
        }
        __syncthreads();   // partial is rewritten by the next row
    }
}

// Sum over groups of LANES consecutive lanes (LANES a power of two dividing 32); every lane gets its group's sum.
template <int LANES>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
    for (int o = LANES / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One activation row, many output rows (the GDN input projections 2560 -> 16480), integer formats: each warp copies
// kStagedRows consecutive rows (contiguous bytes, from the 16-byte boundary at or before them to the one at or after
// them) into its part of shared memory with 16-byte cp.async copies, all in flight together, then decodes them from
// there, 8 lanes a row (lane s: chunks s, s + 8, …), against the activation row that the block copied to shared
// memory once. Needs W 16-byte aligned and rows · row_bytes a multiple of 16 (so no load passes the matrix's end);
// dynamic shared memory staged_smem_bytes(). The default for such matmuls since r29 (STRATA_CUDA_T1_STAGED=0: off).
// A warp's first rows are copied before the activation row (launched with pdl: before the wait, see common.cuh).
constexpr int kStagedRows = 4;

__host__ __device__ inline size_t staged_warp_words(size_t row_bytes) {
    return (kStagedRows * row_bytes + 15) / 16 + 1;
}
// The staged activation row: n int8, n / ablk scales, n / 32 chunk sums (Σa, for kActPerm formats).
__host__ __device__ inline size_t staged_act_bytes(int n, int ablk) {
    return ((size_t)n + (size_t)(n / ablk) * 4 + (size_t)(n / 32) * 4 + 15) / 16 * 16;
}
inline size_t staged_smem_bytes(int n, int ablk, size_t row_bytes, int T = 1) {
    return (size_t)T * staged_act_bytes(n, ablk) + (size_t)kWarps * staged_warp_words(row_bytes) * 16;
}

// Row group r0 … r0 + nr − 1 of a staged matmul: its bytes start at `start`, copied as nw 16-byte words from the
// boundary a0 at or before it.
struct StagedSpan {
    int nr, nw;
    size_t start, a0;
};
__device__ __forceinline__ StagedSpan staged_span(int64_t r0, int64_t rows, size_t row_bytes) {
    StagedSpan sp;
    sp.nr = (int)min((int64_t)kStagedRows, rows - r0);
    sp.start = (size_t)r0 * row_bytes;
    sp.a0 = sp.start & ~(size_t)15;
    sp.nw = (int)((sp.start + (size_t)sp.nr * row_bytes + 15 - sp.a0) / 16);
    return sp;
}

// One row of stage_act_rows (no synchronisation).
template <bool PERM>
__device__ __forceinline__ void stage_act_row(const int8_t* aq, const float* ad, int n, int nd, uint4* staged) {
    float* sd = (float*)((int8_t*)staged + n);
    int* ss = (int*)(sd + nd);
    if constexpr (PERM) {
        for (int u = threadIdx.x; u < n / 32; u += blockDim.x) {
            uint4 v[2] = {__ldg((const uint4*)aq + 2 * u), __ldg((const uint4*)aq + 2 * u + 1)};
            int sum = 0;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                uint32_t g[4] = {v[h].x, v[h].y, v[h].z, v[h].w};
#pragma unroll
                for (int k = 0; k < 4; ++k) sum = dp4a((int)g[k], 0x01010101, sum);
                permute_act16(g);
                staged[2 * u + h] = make_uint4(g[0], g[1], g[2], g[3]);
            }
            ss[u] = sum;
        }
    } else {
        for (int i = threadIdx.x; i < n / 16; i += blockDim.x) staged[i] = __ldg((const uint4*)aq + i);
    }
    for (int i = threadIdx.x; i < nd; i += blockDim.x) sd[i] = __ldg(ad + i);
}

// The staged kernel's prologue after its weights are requested: wait for the kernel before (a programmatic
// dependent launch), copy the T activation rows (row t at staged + t · staged_act_bytes: n int8, nd scales, the Σs)
// and synchronise the block. PERM: each 16 values in permute_act16's order and each 32's Σ into ss (for decode_perm
// and chunk_term_sum).
template <bool PERM>
__device__ __forceinline__ void stage_act_rows(const int8_t* aq, const float* ad, int n, int nd, int T, uint4* staged) {
    pdl_wait();
    aq = pdl_dep(aq);
    ad = pdl_dep(ad);
    const size_t row_words = staged_act_bytes(n, n / nd) / 16;
    for (int t = 0; t < T; ++t)
        stage_act_row<PERM>(aq + (size_t)t * n, ad + (size_t)t * nd, n, nd, staged + t * row_words);
    __syncthreads();
}

// The products of one staged row group, rows r0 … r0 + nr − 1 at rows_at (shared memory), with the T ≤ NT staged
// activation rows (stage_act_rows: act_bytes apart): 8 lanes a row, lane s of a row takes chunks s, s + 8, …, each
// chunk decoded once for every token; y[t · rows + r0 + r] written, each token's sum formed as at T = 1. Every lane
// of the warp calls it (the group sums are shuffles).
// PERM (QInt<F>::kActPerm): the rows in permute_act16's order with the chunks' Σa (stage_act_rows<true>).
template <class F, bool PERM, int NT>
__device__ __forceinline__ void staged_group_dot(const uint8_t* rows_at, size_t row_bytes, int n, const void* grid,
                                                 const uint8_t* act, size_t act_bytes, int T, int64_t r0, int nr,
                                                 int64_t rows, float* y) {
    using Q = QInt<F>;
    constexpr int kLanes = 32 / kStagedRows;
    constexpr int kSub = F::QK / 32;
    const int units = n / 32, nd = n / F::ABLK;
    const int lane = threadIdx.x & 31, s = lane % kLanes, r = lane / kLanes;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
    if (r < nr) {
        const uint8_t* wr = rows_at + (size_t)r * row_bytes;
#pragma unroll 2
        for (int u = s; u < units; u += kLanes) {
            const auto load_act = [&](int t, int (&a)[8]) {   // token t's 32 activations of chunk u
                const int4* q4 = (const int4*)(act + t * act_bytes + 32 * u);
                const int4 lo = q4[0], hi = q4[1];
                a[0] = lo.x; a[1] = lo.y; a[2] = lo.z; a[3] = lo.w;
                a[4] = hi.x; a[5] = hi.y; a[6] = hi.z; a[7] = hi.w;
            };
            int a1[8];   // one row: its activations loaded before the chunk's decode (the one-token order)
            if constexpr (NT == 1) load_act(0, a1);
            IChunk c;
            if constexpr (PERM) Q::decode_perm(wr + (size_t)(u / kSub) * F::BYTES, u % kSub, grid, c);
            else Q::decode(wr + (size_t)(u / kSub) * F::BYTES, u % kSub, grid, c);
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                if (t >= T) break;
                int a[8];
                if constexpr (NT == 1) {
#pragma unroll
                    for (int i = 0; i < 8; ++i) a[i] = a1[i];
                } else {
                    load_act(t, a);
                }
                const float* sd = (const float*)(act + t * act_bytes + n);
                if constexpr (PERM) acc[t] += chunk_term_sum<Q>(c, a, sd[(32 * u) / F::ABLK], ((const int*)(sd + nd))[u]);
                else acc[t] += chunk_term<Q>(c, a, sd[(32 * u) / F::ABLK]);
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        const float v = group_sum<kLanes>(acc[t]);
        if (s == 0 && r < nr && t < T) y[(size_t)t * rows + r0 + r] = v;
    }
}

// PERM: the activation row staged in decode_perm's order (formats with kActPerm; STRATA_CUDA_Q2_PERM=0: not).
// NT > 1: up to NT activation rows (T of them: a verify window), each token's sums formed as at T = 1.
template <class F, bool PERM = QInt<F>::kActPerm, int NT = 1>
__global__ void __launch_bounds__(kWarps * 32, 8)   // 8 blocks an SM: the in_proj's 1,030 in one wave
matmul_q8_staged_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t rows, int n,
                        const int8_t* __restrict__ aq, const float* __restrict__ ad, int T, float* __restrict__ y) {
    if constexpr (NT == 1) T = 1;   // a constant: the one-token instance compiles as before windows existed
    extern __shared__ uint4 staged[];   // the T activation rows (n int8, their scales and Σs), then each warp's rows
    __shared__ uint4 smem[GridSmem<F>::kWords];
    pdl_launch_dependents();
    const void* grid = stage_grid<F>(smem);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nd = n / F::ABLK;
    const size_t act_bytes = staged_act_bytes(n, F::ABLK);
    uint4* buf = (uint4*)((uint8_t*)staged + (size_t)T * act_bytes) + (size_t)warp * staged_warp_words(row_bytes);
    // Rows r0 … r0 + kStagedRows − 1 (their 16-byte words from the boundary at or before r0) into buf with cp.async:
    // every word in flight at once without holding registers (a batch of 8 uint4 loads a lane took the kernel to 72
    // registers, 7 blocks an SM: 924 resident for the in_proj's 1,030, a second wave).
    auto stage = [&](int64_t r0) {
        const StagedSpan sp = staged_span(r0, rows, row_bytes);
        const uint4* src = (const uint4*)(W + sp.a0);
        for (int i = lane; i < sp.nw; i += 32) cp_async16(buf + i, src + i);
        cp_async_commit();
    };
    const int64_t first = ((int64_t)blockIdx.x * kWarps + warp) * kStagedRows;
    if (first < rows) stage(first);   // weights only: before the wait of a programmatic dependent launch
    stage_act_rows<PERM>(aq, ad, n, nd, T, staged);
    const int64_t stride = (int64_t)gridDim.x * kWarps * kStagedRows;
    for (int64_t r0 = first; r0 < rows; r0 += stride) {
        const StagedSpan sp = staged_span(r0, rows, row_bytes);
        if (r0 != first) stage(r0);
        cp_async_wait<0>();
        __syncwarp();
        staged_group_dot<F, PERM, NT>((const uint8_t*)buf + (sp.start - sp.a0), row_bytes, n, grid,
                                      (const uint8_t*)staged, act_bytes, T, r0, sp.nr, rows, y);
        __syncwarp();   // buf is rewritten by the next rows
    }
}


// Several activation rows (T ≥ 2) and an integer format: each warp takes kRows consecutive rows at once, so every
// activation chunk it loads serves kRows rows (with one row per warp, re-reading the activations of 8 tokens for
// each chunk would cost more than the weights).
constexpr int kRows = 4;

template <class F, int NT, bool FQ = false>
__global__ void __launch_bounds__(kWarps * 32)
matmul_q8_rows_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t rows, int n, int act_div,
                      const int8_t* __restrict__ aq, const float* __restrict__ ad, const float* __restrict__ x, int P,
                      float* __restrict__ y) {
    using Q = QInt<F>;
    __shared__ uint4 smem[GridSmem<F>::kWords];
    const void* grid = stage_grid<F>(smem);
    constexpr int kSub = F::QK / 32;
    const int lane = threadIdx.x & 31;
    const int units = n / 32, nd = n / F::ABLK;
    const int p0 = blockIdx.y * NT;
    const int cnt = min(NT, P - p0);
    const int a0 = FQ ? p0 / act_div : 0;
    if constexpr (FQ) quantize_rows_to_smem<F::ABLK>(x, n, a0, (p0 + cnt - 1) / act_div, aq, ad);
    const int64_t stride = (int64_t)gridDim.x * kWarps * kRows;
    for (int64_t r0 = ((int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5)) * kRows; r0 < rows; r0 += stride) {
        const int nr = (int)min((int64_t)kRows, rows - r0);
        float acc[kRows][NT];
#pragma unroll
        for (int i = 0; i < kRows; ++i)
#pragma unroll
            for (int t = 0; t < NT; ++t) acc[i][t] = 0.0f;
        for (int u = lane; u < units; u += 32) {
            IChunk c[kRows];
#pragma unroll
            for (int i = 0; i < kRows; ++i)
                if (i < nr) Q::decode(W + (size_t)(r0 + i) * row_bytes + (size_t)(u / kSub) * F::BYTES, u % kSub, grid, c[i]);
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                if (t >= cnt) break;
                const size_t ar = (size_t)((p0 + t) / act_div - a0);
                const int4* q4 = (const int4*)(aq + ar * n + 32 * u);
                const int4 lo = load_act4<FQ>(q4), hi = load_act4<FQ>(q4 + 1);
                const int a[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
                const float da = load_act_scale<FQ>(ad + ar * nd + (32 * u) / F::ABLK);
#pragma unroll
                for (int i = 0; i < kRows; ++i)
                    if (i < nr) acc[i][t] += chunk_term<Q>(c[i], a, da);
            }
        }
#pragma unroll
        for (int i = 0; i < kRows; ++i)
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                const float v = warp_sum(acc[i][t]);
                if (lane == 0 && i < nr && t < cnt) y[(size_t)(p0 + t) * rows + r0 + i] = v;
            }
    }
}

// Matrices by id: block column p computes pair p, or with NT > 1 (grouping) every pair with the id of p when p is
// the first pair with that id (the others' columns return at once), NT pairs per pass over the row.
// FQ: the block quantizes the activation rows it reads (row p / act_div, or with grouping all rows) from x.
template <class F, int NT, bool FQ = false>
__global__ void __launch_bounds__(kWarps * 32)
matmul_q8_ids_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t rows, int n, size_t mat_stride,
                     const int32_t* __restrict__ ids, int act_div, const int8_t* __restrict__ aq,
                     const float* __restrict__ ad, const float* __restrict__ x, int P, float* __restrict__ y) {
    __shared__ uint4 smem[GridSmem<F>::kWords];
    const int p = blockIdx.y;
    const int32_t e = __ldg(ids + p);
    if (NT > 1)
        for (int q = 0; q < p; ++q)
            if (__ldg(ids + q) == e) return;   // the whole block: p is the same for all its threads
    const void* grid = stage_grid<F>(smem);
    const int a0 = FQ && NT == 1 ? p / act_div : 0;
    if constexpr (FQ) quantize_rows_to_smem<F::ABLK>(x, n, a0, NT == 1 ? a0 : (P - 1) / act_div, aq, ad);
    for (int64_t row = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5); row < rows; row += (int64_t)gridDim.x * kWarps) {
        const uint8_t* wr = W + (size_t)e * mat_stride + (size_t)row * row_bytes;
        int q = p;
        while (q < P) {
            int pair[NT], arow[NT], cnt = 0;
            float acc[NT];
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                pair[t] = 0;
                acc[t] = 0.0f;
            }
            for (; q < P && cnt < NT; ++q)
                if (q == p || (NT > 1 && __ldg(ids + q) == e)) {
#pragma unroll
                    for (int t = 0; t < NT; ++t)
                        if (t == cnt) pair[t] = q;   // a register array needs constant indices
                    ++cnt;
                }
            if (NT == 1) q = P;
            if (cnt == 0) break;
#pragma unroll
            for (int t = 0; t < NT; ++t) arow[t] = pair[t] / act_div - a0;
            row_dot_q8<F, NT, FQ>(wr, n, grid, aq, ad, arow, cnt, acc);
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                const float v = warp_sum(acc[t]);
                if ((threadIdx.x & 31) == 0 && t < cnt) y[(size_t)pair[t] * rows + row] = v;
            }
        }
    }
}

// The routed experts' gate and up projections with swiglu in one pass: h[p, r] = silu(g) · u, g = gate_p[r] · x,
// u = up_p[r] · x for pair p (matrices ids[p] of Wg and Wu, same shapes; activation row p / act_div). Each chunk of
// both rows is decoded once and dotted with the same activations; pairs grouped by expert as matmul_q8_ids_kernel.
template <class F, int NT>
__global__ void __launch_bounds__(kWarps * 32)
moe_gate_up_kernel(const uint8_t* __restrict__ Wg, const uint8_t* __restrict__ Wu, size_t row_bytes, int64_t rows,
                   int n, size_t mat_stride, const int32_t* __restrict__ ids, int act_div,
                   const int8_t* __restrict__ aq, const float* __restrict__ ad, int P, float* __restrict__ h) {
    using Q = QInt<F>;
    __shared__ uint4 smem[GridSmem<F>::kWords];
    const int p = blockIdx.y;
    const int32_t e = __ldg(ids + p);
    if (NT > 1)
        for (int q = 0; q < p; ++q)
            if (__ldg(ids + q) == e) return;   // the whole block: p is the same for all its threads
    const void* grid = stage_grid<F>(smem);
    constexpr int kSub = F::QK / 32;
    const int lane = threadIdx.x & 31;
    const int units = n / 32, nd = n / F::ABLK;
    for (int64_t row = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5); row < rows; row += (int64_t)gridDim.x * kWarps) {
        const size_t off = (size_t)e * mat_stride + (size_t)row * row_bytes;
        int q = p;
        while (q < P) {
            int pair[NT], cnt = 0;
            float ag[NT], au[NT];
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                pair[t] = 0;
                ag[t] = au[t] = 0.0f;
            }
            for (; q < P && cnt < NT; ++q)
                if (q == p || (NT > 1 && __ldg(ids + q) == e)) {
#pragma unroll
                    for (int t = 0; t < NT; ++t)
                        if (t == cnt) pair[t] = q;
                    ++cnt;
                }
            if (NT == 1) q = P;
            if (cnt == 0) break;
            for (int u = lane; u < units; u += 32) {
                const size_t b = off + (size_t)(u / kSub) * F::BYTES;
                IChunk cg, cu;
                Q::decode(Wg + b, u % kSub, grid, cg);
                Q::decode(Wu + b, u % kSub, grid, cu);
#pragma unroll
                for (int t = 0; t < NT; ++t) {
                    if (t >= cnt) break;
                    const size_t ar = (size_t)(pair[t] / act_div);
                    const int4* q4 = (const int4*)(aq + ar * n + 32 * u);
                    const int4 lo = __ldg(q4), hi = __ldg(q4 + 1);
                    const int a[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
                    const float da = __ldg(ad + ar * nd + (32 * u) / F::ABLK);
                    ag[t] += chunk_term<Q>(cg, a, da);
                    au[t] += chunk_term<Q>(cu, a, da);
                }
            }
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                const float g = warp_sum(ag[t]), v = warp_sum(au[t]);
                if (lane == 0 && t < cnt) h[(size_t)pair[t] * rows + row] = g / (1.0f + expf(-g)) * v;   // as swiglu
            }
        }
    }
}

}  // namespace strata::cuda::q8
