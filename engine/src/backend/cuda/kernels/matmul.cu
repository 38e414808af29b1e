// matmul (and its expert-indexed variant for moe_experts) over weights in their stored block formats, the
// activation quantization the CPU path uses (Q8_0 / Q8_K, so both paths round the same way; or f32 activations as
// the CPU's --f32-activations reference mode), the row gather that embed uses, and the launchers that pick a kernel
// by format and activation rows (the Q8-activation kernels are in matmul_q8.cuh). A warp reads a row's blocks in
// order (lane l takes 32-weight chunks l, l+32, …) and decodes each chunk once for all activation rows it serves.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/kernels/matmul_q8.cuh"
#include "backend/cuda/kernels/matmul_q6k_t1.cuh"
#include "backend/cuda/kernels/matmul_tiled.h"
#include "backend/cuda/kernels/moe_decode.cuh"
#include "backend/cuda/kernels/moe_gate_up.h"
#include "backend/cuda/kernels/plain_dot.cuh"
#include "backend/cuda/kernels/t1_variants.h"
#include "backend/cuda/kernels/quant_dots.cuh"
#include "backend/cuda/kernels/quant_formats.cuh"
#include "common/env.h"
#include "common/error.h"

namespace strata::cuda {

bool pdl_enabled() {
    static const bool on = env_switch("STRATA_CUDA_PDL", true) && device_cc_major() >= 9;
    return on;
}

namespace {

using namespace q8;        // the Q8-activation kernels (matmul_q8.cuh) and kWarps, the warps per block
constexpr int kTile = 8;   // activation rows per pass when every row uses the same matrix

// ---- activation quantization: one warp per block of BLK values (quantize_act_values, matmul_q8.cuh) ----
template <int BLK>
__global__ void quantize_act_kernel(const float* __restrict__ x, int64_t n_blocks, int8_t* __restrict__ q,
                                    float* __restrict__ d) {
    pdl_launch_dependents();
    pdl_wait();
    x = pdl_dep(x);
    const int64_t b = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (b >= n_blocks) return;
    float v[BLK / 32];
    load_act_values<BLK>(x + b * BLK, threadIdx.x & 31, v);
    quantize_act_values<BLK>(v, threadIdx.x & 31, q + b * BLK, d + b);
}

// ---- block formats with f32 activations (the reference mode): y[p, row] for p in [p0, p0 + NT) ----
template <class F, int NT>
__global__ void __launch_bounds__(kWarps * 32)
matmul_block_f32act_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t rows, int n, size_t mat_stride,
                           const int32_t* __restrict__ ids, int act_div, const float* __restrict__ x, int P,
                           float* __restrict__ y) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (row >= rows) return;
    const int p0 = blockIdx.y * NT;
    const uint8_t* wr = W + (ids ? (size_t)ids[p0] * mat_stride : 0) + (size_t)row * row_bytes;
    constexpr int kSub = F::QK / 32;
    const int units = n / 32;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
    for (int u = lane; u < units; u += 32) {
        float w[32];
        F::deq32(wr + (size_t)(u / kSub) * F::BYTES, u % kSub, w);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const int p = p0 + t;
            if (p < P) {
                const float* xr = x + (size_t)(p / act_div) * n + 32 * u;
                float s = 0.0f;
#pragma unroll
                for (int e = 0; e < 32; ++e) s = fmaf(w[e], xr[e], s);
                acc[t] += s;
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        const float v = warp_sum(acc[t]);
        if (lane == 0 && p0 + t < P) y[(size_t)(p0 + t) * rows + row] = v;
    }
}

// ---- F32 / F16 / BF16 weights with f32 activations (PlainType, load_plain: plain_dot.cuh) ----
template <int TY, int V, int NT>
__global__ void __launch_bounds__(kWarps * 32)
matmul_plain_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t rows, int n, size_t mat_stride,
                    const int32_t* __restrict__ ids, int act_div, const float* __restrict__ x, int P,
                    float* __restrict__ y) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (row >= rows) return;
    const int p0 = blockIdx.y * NT;
    const uint8_t* wr = W + (ids ? (size_t)ids[p0] * mat_stride : 0) + (size_t)row * row_bytes;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
    for (int i = V * lane; i < n; i += 32 * V) {
        float w[V];
        load_plain<TY, V>(wr, i, w);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const int p = p0 + t;
            if (p < P) {
                const float* xr = x + (size_t)(p / act_div) * n + i;
                if (V == 4) {
                    const float4 xv = *(const float4*)xr;
                    acc[t] = fmaf(w[0], xv.x, fmaf(w[1], xv.y, fmaf(w[2], xv.z, fmaf(w[3], xv.w, acc[t]))));
                } else {
                    acc[t] = fmaf(w[0], xr[0], acc[t]);
                }
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        const float v = warp_sum(acc[t]);
        if (lane == 0 && p0 + t < P) y[(size_t)(p0 + t) * rows + row] = v;
    }
}

// One activation row, few output rows (the F32 router 2560 -> 512): one row per block (plain_row_dot_block). NT > 1:
// up to NT rows x [T, n] (a verify window), each as at T = 1.
template <int TY, int V, int NT = 1>
__global__ void __launch_bounds__(kWarps * 32)
matmul_plain_splitk_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t rows, int n,
                           const float* __restrict__ x, int T, float* __restrict__ y) {
    if constexpr (NT == 1) T = 1;   // a constant: the one-token instance compiles as before windows existed
    pdl_launch_dependents();
    if (blockIdx.x < rows) prefetch_l2_lines(W + (size_t)blockIdx.x * row_bytes, row_bytes, threadIdx.x, blockDim.x);
    pdl_wait();
    x = pdl_dep(x);
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        float sum[NT];
        plain_rows_dot_block<TY, V, kWarps, NT>(W + (size_t)row * row_bytes, n, x, T, sum);
        if (threadIdx.x == 0)
#pragma unroll
            for (int t = 0; t < NT; ++t)
                if (t < T) y[(size_t)t * rows + row] = sum[t];
    }
}

// Several activation rows on one matrix: each warp takes kRows consecutive rows at once, so each activation value
// it loads serves kRows rows (same sums, in the same order, as matmul_plain_kernel).
template <int TY, int V, int NT>
__global__ void __launch_bounds__(kWarps * 32)
matmul_plain_rows_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t rows, int n, int act_div,
                         const float* __restrict__ x, int P, float* __restrict__ y) {
    const int lane = threadIdx.x & 31;
    const int64_t r0 = ((int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5)) * kRows;
    if (r0 >= rows) return;
    const int nr = (int)min((int64_t)kRows, rows - r0);
    const int p0 = blockIdx.y * NT;
    const int cnt = min(NT, P - p0);
    float acc[kRows][NT];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;
    for (int i = V * lane; i < n; i += 32 * V) {
        float w[kRows][V];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            if (r < nr) {
                load_plain<TY, V>(W + (size_t)(r0 + r) * row_bytes, i, w[r]);
            } else {
#pragma unroll
                for (int k = 0; k < V; ++k) w[r][k] = 0.0f;
            }
        }
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            if (t >= cnt) break;
            const float* xr = x + (size_t)((p0 + t) / act_div) * n + i;
            if (V == 4) {
                const float4 xv = *(const float4*)xr;
#pragma unroll
                for (int r = 0; r < kRows; ++r)
                    acc[r][t] = fmaf(w[r][0], xv.x, fmaf(w[r][1], xv.y, fmaf(w[r][2], xv.z, fmaf(w[r][3], xv.w, acc[r][t]))));
            } else {
                const float xv = xr[0];
#pragma unroll
                for (int r = 0; r < kRows; ++r) acc[r][t] = fmaf(w[r][0], xv, acc[r][t]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const float v = warp_sum(acc[r][t]);
            if (lane == 0 && r < nr && t < cnt) y[(size_t)(p0 + t) * rows + r0 + r] = v;
        }
}

// ---- row gather (embed): one block per token ----
template <class F>
__global__ void dequant_rows_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int n,
                                    const int32_t* __restrict__ ids, float* __restrict__ y) {
    const uint8_t* wr = W + (size_t)ids[blockIdx.x] * row_bytes;
    float* yr = y + (size_t)blockIdx.x * n;
    constexpr int kSub = F::QK / 32;
    for (int u = threadIdx.x; u < n / 32; u += blockDim.x) {
        float w[32];
        F::deq32(wr + (size_t)(u / kSub) * F::BYTES, u % kSub, w);
#pragma unroll
        for (int e = 0; e < 32; ++e) yr[32 * u + e] = w[e];
    }
}

template <int TY>
__global__ void dequant_rows_plain_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int n,
                                          const int32_t* __restrict__ ids, float* __restrict__ y) {
    const uint8_t* wr = W + (size_t)ids[blockIdx.x] * row_bytes;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float w;
        load_plain<TY, 1>(wr, i, &w);
        y[(size_t)blockIdx.x * n + i] = w;
    }
}

template <class F>
void launch_block_f32act(cudaStream_t s, const MatmulArgs& m, const float* x, int P, float* y) {
    const unsigned gx = grid_for((size_t)m.rows, kWarps);
    if (!m.ids && P > 1) {
        dim3 grid(gx, (unsigned)((P + kTile - 1) / kTile));
        matmul_block_f32act_kernel<F, kTile><<<grid, kWarps * 32, 0, s>>>(m.w, m.row_bytes, m.rows, m.n, m.mat_stride,
                                                                          m.ids, m.act_div, x, P, y);
    } else {
        dim3 grid(gx, (unsigned)P);
        matmul_block_f32act_kernel<F, 1><<<grid, kWarps * 32, 0, s>>>(m.w, m.row_bytes, m.rows, m.n, m.mat_stride,
                                                                      m.ids, m.act_div, x, P, y);
    }
}

// Blocks of kWarps warps of `kernel` that the whole GPU holds at once (its SMs × blocks per SM), asked once per
// kernel and kept in `known`. Not asked while s is being captured into a graph (the query may load the kernel's
// module): then no limit, and the kernels simply get one block per kWarps rows.
template <class Kernel>
unsigned resident_blocks(cudaStream_t s, Kernel kernel, std::atomic<unsigned>& known, size_t smem = 0) {
    const unsigned k = known.load(std::memory_order_relaxed);
    if (k) return k;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
    if (capture != cudaStreamCaptureStatusNone) return 0x7fffffffu;
    int dev = 0, sms = 0, per_sm = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, smem));
    const unsigned r = (unsigned)std::max(1, sms * per_sm);
    known.store(r, std::memory_order_relaxed);
    return r;
}

// Grid of gy columns whose rows are spread over at most one wave of resident blocks (the kernels loop over rows).
inline dim3 row_grid(int64_t rows, unsigned gy, unsigned resident) {
    const unsigned per_column = std::max(1u, resident / gy);
    return dim3(std::min(grid_for((size_t)rows, kWarps), per_column), gy);
}

// The fused-quantization kernels' dynamic shared memory is bounded by kFusedSmemMax (with the grid table, within
// the 48 KiB a kernel gets without opting in); their resident blocks depend on it, so they are known per 4 KiB step.
constexpr size_t kFusedSmemMax = 40 * 1024;
constexpr size_t kSmemStep = 4 * 1024;

struct ResidentCache {
    std::atomic<unsigned> known[228 * 1024 / kSmemStep + 1]{};   // up to sm_90's opt-in shared memory a block
};

template <class Kernel>
unsigned resident_for(cudaStream_t s, Kernel kernel, ResidentCache& cache, size_t smem) {
    const size_t step = (smem + kSmemStep - 1) / kSmemStep;
    return resident_blocks(s, kernel, cache.known[step], step * kSmemStep);
}

// FQ = true: act is unused and the kernel quantizes x itself into `smem` bytes of shared memory.
template <class F, int NT, bool FQ = false>
void launch_q8_dense(cudaStream_t s, const MatmulArgs& m, const float* x, ActQ8 act, int P, float* y, size_t smem = 0) {
    static ResidentCache known;
    const unsigned resident = resident_for(s, matmul_q8_kernel<F, NT, FQ>, known, smem);
    const dim3 grid = row_grid(m.rows, (unsigned)((P + NT - 1) / NT), resident);
    matmul_q8_kernel<F, NT, FQ><<<grid, kWarps * 32, smem, s>>>(m.w, m.row_bytes, m.rows, m.n, m.act_div, act.q, act.d,
                                                                x, P, y);
}

template <class F, int NT, bool FQ = false>
void launch_q8_rows(cudaStream_t s, const MatmulArgs& m, const float* x, ActQ8 act, int P, float* y, size_t smem = 0) {
    static ResidentCache known;
    const unsigned resident = resident_for(s, matmul_q8_rows_kernel<F, NT, FQ>, known, smem);
    const unsigned gy = (unsigned)((P + NT - 1) / NT);
    const dim3 grid(std::min(grid_for((size_t)m.rows, kWarps * kRows), std::max(1u, resident / gy)), gy);
    matmul_q8_rows_kernel<F, NT, FQ><<<grid, kWarps * 32, smem, s>>>(m.w, m.row_bytes, m.rows, m.n, m.act_div, act.q,
                                                                     act.d, x, P, y);
}

template <class F, int NT, bool FQ = false>
void launch_q8_ids(cudaStream_t s, const MatmulArgs& m, const float* x, ActQ8 act, int P, float* y, size_t smem = 0) {
    static ResidentCache known;
    const unsigned resident = resident_for(s, matmul_q8_ids_kernel<F, NT, FQ>, known, smem);
    const dim3 grid = row_grid(m.rows, (unsigned)P, resident);
    matmul_q8_ids_kernel<F, NT, FQ><<<grid, kWarps * 32, smem, s>>>(m.w, m.row_bytes, m.rows, m.n, m.mat_stride, m.ids,
                                                                    m.act_div, act.q, act.d, x, P, y);
}

// Expert pairs are grouped by id only when there are more pairs than one token's top-k can have (decode: no
// scan, one pair per block column).
constexpr int kGroupAbove = 16;
constexpr int kGroupTile = 4;

// STRATA_CUDA_T1_ROWS=1: single-row matmuls (decode) of the integer formats also take 4 rows per warp. An A/B switch
// for bench/cuda_kernels/run.sh until the H200 numbers pick one; read once.
bool t1_rows() {
    static const bool on = env_switch("STRATA_CUDA_T1_ROWS", false);
    return on;
}

// STRATA_CUDA_SPLITK_2WARPS=0: the split-K kernel always with 4-warp blocks (an A/B of its one-wave choice in
// launch_q8); read once.
bool splitk_two_warps() {
    static const bool on = env_switch("STRATA_CUDA_SPLITK_2WARPS", true);
    return on;
}

// Split-K for one activation row (matmul_q8_splitk_kernel / matmul_plain_splitk_kernel): when the output has too
// few rows to fill the GPU with one row per warp and the rows are long enough for a block's 128 threads.
// STRATA_CUDA_SPLITK=0 turns it off (A/B in bench/cuda_kernels/run.sh); read once.
// Both split-K kernels also take a verify window of up to kSplitKWindow rows, each token's sums formed as at one row:
// the shape decides, whatever P ≤ kSplitKWindow.
constexpr int64_t kSplitKMaxRows = 8192;
constexpr int kSplitKMinUnits = 64;   // 32-value chunks (or V-wide steps) per row
constexpr int64_t kSplitKFusedBlocks = 1024;
constexpr int kSplitKWindow = 4;
bool splitk(const MatmulArgs& m, int P, int units) {
    static const bool on = env_switch("STRATA_CUDA_SPLITK", true);
    return on && P >= 1 && P <= kSplitKWindow && !m.ids && m.rows <= kSplitKMaxRows && units >= kSplitKMinUnits;
}

// The Q8 split-K launch for P ≤ kSplitKWindow activation rows (NT = 1 or kSplitKWindow). Its block size is chosen
// as for one row whatever P (the warps' count sets the order of a row's sums).
template <class F, bool FQ>
void launch_q8_splitk(cudaStream_t s, const MatmulArgs& m, const float* x, ActQ8 act, int P, float* y, size_t smem) {
    const unsigned grid = FQ ? (unsigned)std::min<int64_t>(m.rows, kSplitKFusedBlocks) : (unsigned)m.rows;
    // 2-warp blocks where 4-warp ones would not all fit at once (and 2-warp ones do): one wave
    static std::atomic<unsigned> known4{0}, known2{0};
    const bool two = !FQ && splitk_two_warps() &&
                     grid > blocks_at_once(matmul_q8_splitk_kernel<F, FQ, 4>, 128, smem, known4) &&
                     grid <= blocks_at_once(matmul_q8_splitk_kernel<F, FQ, 2>, 64, smem, known2);
    auto launch = [&](auto kernel, unsigned threads) {
        launch_kernel(kernel, grid, threads, smem, s, pdl_enabled(), m.w, m.row_bytes, m.rows, m.n, act.q, act.d, x, P,
                      y);
    };
    if (P == 1) {
        if (two) launch(matmul_q8_splitk_kernel<F, FQ, 2>, 64);
        else launch(matmul_q8_splitk_kernel<F, FQ, 4>, 128);
    } else {
        if (two) launch(matmul_q8_splitk_kernel<F, FQ, 2, kSplitKWindow>, 64);
        else launch(matmul_q8_splitk_kernel<F, FQ, 4, kSplitKWindow>, 128);
    }
}

// Single-row matmuls of many rows (over kSplitKMaxRows: the GDN in_proj 2560 -> 16480) in the integer formats copy
// their rows to shared memory with 16-byte cp.async copies first (matmul_q8_staged_kernel). On by default since 2026-12-04
// (H200, decode at 1K all on the GPU: r29 224.5 / 226.5 tok/s against 213.7 / 222.1 without, r31 221.0 / 221.6
// against 219.7: a small gain at most, never slower); STRATA_CUDA_T1_STAGED=0 turns it off. Read once.
std::atomic<int64_t> g_t1_staged_calls{0};   // launches, for the tests' path checks
bool t1_staged(const MatmulArgs& m, size_t smem) {
    static const bool on = env_switch("STRATA_CUDA_T1_STAGED", true);
    return on && !m.ids && m.rows > kSplitKMaxRows && (m.rows * m.row_bytes) % 16 == 0 && (uintptr_t)m.w % 16 == 0 &&
           smem <= kFusedSmemMax;
}

// The Q6_K kernel for one activation row and many rows (the output head; matmul_q6k_t1.cuh) when the rows stage in
// 16-byte copies: rows a multiple of kQ6Rows, kQ6Rows rows a multiple of 16 bytes, W 16-byte aligned.
// STRATA_CUDA_Q6K_T1=0 turns it off (A/B); read once.
constexpr int64_t kQ6kT1MinRows = 4096;
// Shared memory a block may opt in to on this device (99 KB on sm_86 / 89 / 120, 227 KB on sm_90); asked once.
size_t smem_optin_bytes() {
    static const size_t bytes = [] {
        int dev = 0, v = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        return (size_t)v;
    }();
    return bytes;
}
// P ≤ kQ6kWindow rows: one, or a verify window's (each row as at one).
constexpr int kQ6kWindow = 4;
bool q6k_t1(const MatmulArgs& m, int P) {
    static const bool on = env_switch("STRATA_CUDA_Q6K_T1", true);
    return on && P >= 1 && P <= kQ6kWindow && !m.ids && m.type == GgmlType::Q6_K && m.rows >= kQ6kT1MinRows &&
           m.rows % kQ6Rows == 0 && (kQ6Rows * m.row_bytes) % 16 == 0 && (uintptr_t)m.w % 16 == 0 && m.n % 256 == 0 &&
           q6k_t1_smem_bytes(m.n, m.row_bytes, P) <= smem_optin_bytes();
}

std::atomic<int64_t> g_q6k_t1_calls{0};   // launches, for the tests' path checks

template <bool FQ, int NT>
void launch_q6k_t1_nt(cudaStream_t s, const MatmulArgs& m, const float* x, ActQ8 act, int P, float* y) {
    const size_t smem = q6k_t1_smem_bytes(m.n, m.row_bytes, P);
    // The opt-in above 48 KiB a block, per size (the head's ~71 KB); raised once for the largest asked.
    static std::atomic<size_t> opted{0};
    if (smem > opted.load(std::memory_order_relaxed)) {
        CUDA_CHECK(cudaFuncSetAttribute(matmul_q6k_t1_kernel<FQ, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
        opted.store(smem, std::memory_order_relaxed);
    }
    static std::atomic<unsigned> resident{0};   // one row length and P (one smem size) in practice
    const unsigned r = resident_blocks(s, matmul_q6k_t1_kernel<FQ, NT>, resident, smem);
    const int64_t groups = m.rows / kQ6Rows;
    const unsigned grid = (unsigned)std::min<int64_t>((groups + kWarps - 1) / kWarps, r);
    matmul_q6k_t1_kernel<FQ, NT><<<grid, kWarps * 32, smem, s>>>(m.w, m.row_bytes, m.rows, m.n, act.q, act.d, x, P, y);
    g_q6k_t1_calls.fetch_add(1, std::memory_order_relaxed);
}

template <bool FQ>
void launch_q6k_t1(cudaStream_t s, const MatmulArgs& m, const float* x, ActQ8 act, int P, float* y) {
    if (P == 1) launch_q6k_t1_nt<FQ, 1>(s, m, x, act, P, y);
    else launch_q6k_t1_nt<FQ, kQ6kWindow>(s, m, x, act, P, y);
}

// One staged kernel's launch with smem bytes of dynamic shared memory (opted in: a verify window's activation rows
// can take it over the 48 KiB a block gets without).
template <class F, bool PERM, int NT>
void launch_staged_kernel(cudaStream_t s, const MatmulArgs& m, ActQ8 act, int P, float* y, size_t smem) {
    const auto kernel = matmul_q8_staged_kernel<F, PERM, NT>;
    static std::atomic<size_t> opted{0};
    if (smem > opted.load(std::memory_order_relaxed)) {
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        opted.store(smem, std::memory_order_relaxed);
    }
    static ResidentCache known;
    const unsigned resident = resident_for(s, kernel, known, smem);
    const unsigned grid = std::min(grid_for((size_t)m.rows, kWarps * kStagedRows), resident);
    launch_kernel(kernel, grid, kWarps * 32, smem, s, pdl_enabled(), m.w, m.row_bytes, m.rows, m.n, act.q, act.d, P, y);
}

// The staged kernel (matmul_q8_staged_kernel) for P ≤ kSplitKWindow activation rows when t1_staged takes the matrix
// at one row (NT = 1, or kSplitKWindow for a verify window, each row as at one); false, launching nothing, otherwise.
template <class F>
bool launch_q8_staged(cudaStream_t s, const MatmulArgs& m, ActQ8 act, int P, float* y) {
    if constexpr (!QInt<F>::kHas) {
        return false;
    } else {
        const size_t smem = staged_smem_bytes(m.n, F::ABLK, m.row_bytes, P);
        if (P > kSplitKWindow || !t1_staged(m, staged_smem_bytes(m.n, F::ABLK, m.row_bytes, 1)) ||
            smem + sizeof(uint4) * GridSmem<F>::kWords > smem_optin_bytes())
            return false;
        auto launch_nt = [&](auto nt) {
            constexpr int NT = decltype(nt)::value;
            if constexpr (QInt<F>::kActPerm) {
                if (q2_perm()) launch_staged_kernel<F, true, NT>(s, m, act, P, y, smem);
                else launch_staged_kernel<F, false, NT>(s, m, act, P, y, smem);
            } else {
                launch_staged_kernel<F, false, NT>(s, m, act, P, y, smem);
            }
        };
        if (P == 1) launch_nt(std::integral_constant<int, 1>{});
        else launch_nt(std::integral_constant<int, kSplitKWindow>{});
        g_t1_staged_calls.fetch_add(1, std::memory_order_relaxed);
        return true;
    }
}

// The Q8-activation kernels: FQ = false reads act, FQ = true quantizes x in each block (smem bytes for that).
template <class F, bool FQ>
void launch_q8(cudaStream_t s, const MatmulArgs& m, const float* x, ActQ8 act, int P, float* y, size_t smem) {
    if (m.ids) {
        if (P > kGroupAbove) launch_q8_ids<F, kGroupTile, FQ>(s, m, x, act, P, y, smem);
        else launch_q8_ids<F, 1, FQ>(s, m, x, act, P, y, smem);
    } else if (P == 1) {
        if constexpr (std::is_same_v<F, FmtQ6_K>)
            if (q6k_t1(m, P)) {
                launch_q6k_t1<FQ>(s, m, x, act, P, y);
                return;
            }
        if (splitk(m, P, m.n / 32)) {   // fused quantization: fewer blocks, each quantizing x once for many rows
            launch_q8_splitk<F, FQ>(s, m, x, act, P, y, smem);
            return;
        }
        if constexpr (QInt<F>::kHas)
            if (!FQ && launch_q8_staged<F>(s, m, act, P, y)) return;
        if constexpr (QInt<F>::kHas)
            if (t1_rows()) {
                launch_q8_rows<F, 1, FQ>(s, m, x, act, P, y, smem);
                return;
            }
        launch_q8_dense<F, 1, FQ>(s, m, x, act, P, y, smem);
    } else if (std::is_same_v<F, FmtQ6_K> && q6k_t1(m, P)) {   // a verify window's head: each row as at P = 1
        launch_q6k_t1<FQ>(s, m, x, act, P, y);
    } else if (splitk(m, P, m.n / 32)) {   // a verify window: each row as at P = 1
        launch_q8_splitk<F, FQ>(s, m, x, act, P, y, smem);
    } else if (!FQ && launch_q8_staged<F>(s, m, act, P, y)) {
        // a verify window through the staged kernel, each row as at P = 1
    } else if constexpr (QInt<F>::kHas) {
        if (P == 2) launch_q8_rows<F, 2, FQ>(s, m, x, act, P, y, smem);
        else if (P <= 4) launch_q8_rows<F, 4, FQ>(s, m, x, act, P, y, smem);
        else launch_q8_rows<F, kTile, FQ>(s, m, x, act, P, y, smem);
    } else {
        if (P == 2) launch_q8_dense<F, 2, FQ>(s, m, x, act, P, y, smem);
        else if (P <= 4) launch_q8_dense<F, 4, FQ>(s, m, x, act, P, y, smem);
        else launch_q8_dense<F, kTile, FQ>(s, m, x, act, P, y, smem);
    }
}

template <class F>
void launch_block(cudaStream_t s, const MatmulArgs& m, const float* x, ActQ8 act, int P, float* y) {
    STRATA_CHECK(m.n % F::QK == 0, "cuda matmul: row length ", m.n, " is not a multiple of the ", ggml_type_name(m.type),
                 " block of ", F::QK);
    if (!act.q) launch_block_f32act<F>(s, m, x, P, y);
    else launch_q8<F, false>(s, m, x, act, P, y, 0);
    CUDA_CHECK_LAUNCH();
}

// Shared memory one block of the fused kernels needs for P pairs (0 when they are not used for this call): a
// dense column of kTile pairs reads at most kTile activation rows, an ids column one row, or all rows when grouped.
template <class F>
size_t fused_smem(const MatmulArgs& m, int P) {
    if (m.n % F::QK != 0) return 0;
    int rows = 0;
    if (m.ids) rows = P > kGroupAbove ? (P - 1) / m.act_div + 1 : 1;
    else if (P <= kTile) rows = (P - 1) / m.act_div + 1;
    if (rows == 0 || rows > kTile) return 0;
    const size_t bytes = fused_act_bytes(rows, m.n, F::ABLK);
    const size_t grid_table = sizeof(uint4) * GridSmem<F>::kWords;
    return bytes <= kFusedSmemMax && bytes + grid_table <= 48 * 1024 ? bytes : 0;
}

template <int TY, int V>
void launch_plain_v(cudaStream_t s, const MatmulArgs& m, const float* x, int P, float* y) {
    const unsigned gx = grid_for((size_t)m.rows, kWarps);
    if (P > 1 && splitk(m, P, m.n / V)) {   // a verify window: each row as at P = 1
        launch_kernel(matmul_plain_splitk_kernel<TY, V, kSplitKWindow>, (unsigned)m.rows, kWarps * 32, 0, s,
                      pdl_enabled(), m.w, m.row_bytes, m.rows, m.n, x, P, y);
    } else if (!m.ids && P > 1) {
        const unsigned gr = grid_for((size_t)m.rows, kWarps * kRows);
        auto rows_launch = [&](auto nt) {
            constexpr int NT = decltype(nt)::value;
            dim3 grid(gr, (unsigned)((P + NT - 1) / NT));
            matmul_plain_rows_kernel<TY, V, NT><<<grid, kWarps * 32, 0, s>>>(m.w, m.row_bytes, m.rows, m.n, m.act_div,
                                                                             x, P, y);
        };
        if (P == 2) rows_launch(std::integral_constant<int, 2>{});
        else if (P <= 4) rows_launch(std::integral_constant<int, 4>{});
        else rows_launch(std::integral_constant<int, kTile>{});
    } else if (splitk(m, P, m.n / V)) {
        launch_kernel(matmul_plain_splitk_kernel<TY, V>, (unsigned)m.rows, kWarps * 32, 0, s, pdl_enabled(), m.w,
                      m.row_bytes, m.rows, m.n, x, 1, y);
    } else {
        dim3 grid(gx, (unsigned)P);
        matmul_plain_kernel<TY, V, 1><<<grid, kWarps * 32, 0, s>>>(m.w, m.row_bytes, m.rows, m.n, m.mat_stride,
                                                                   m.ids, m.act_div, x, P, y);
    }
    CUDA_CHECK_LAUNCH();
}

template <int TY>
void launch_plain(cudaStream_t s, const MatmulArgs& m, const float* x, int P, float* y) {
    // 16-byte loads need rows and activations on 16-byte (f32) or 8-byte (f16/bf16) boundaries.
    const size_t wa = TY == kF32 ? 16 : 8;
    const bool vec = m.n % 4 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)m.w % wa == 0 && m.row_bytes % wa == 0 &&
                     m.mat_stride % wa == 0;
    if (vec) launch_plain_v<TY, 4>(s, m, x, P, y);
    else launch_plain_v<TY, 1>(s, m, x, P, y);
}

}  // namespace

void upload_iq_tables() {
    CUDA_CHECK(cudaMemcpyToSymbol(d_iq2xxs_grid, iq::iq2xxs_grid, sizeof(iq::iq2xxs_grid)));
    CUDA_CHECK(cudaMemcpyToSymbol(d_iq2xs_grid, iq::iq2xs_grid, sizeof(iq::iq2xs_grid)));
    CUDA_CHECK(cudaMemcpyToSymbol(d_iq2s_grid, iq::iq2s_grid, sizeof(iq::iq2s_grid)));
    CUDA_CHECK(cudaMemcpyToSymbol(d_iq3xxs_grid, iq::iq3xxs_grid, sizeof(iq::iq3xxs_grid)));
    CUDA_CHECK(cudaMemcpyToSymbol(d_iq3s_grid, iq::iq3s_grid, sizeof(iq::iq3s_grid)));
    CUDA_CHECK(cudaMemcpyToSymbol(d_ksigns_iq2xs, iq::ksigns_iq2xs, sizeof(iq::ksigns_iq2xs)));
    CUDA_CHECK(cudaMemcpyToSymbol(d_kvalues_iq4nl, iq::kvalues_iq4nl, sizeof(iq::kvalues_iq4nl)));
}

bool format_supported(GgmlType t) {
    return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || with_block_format(t, [](auto) {});
}

int act_block(GgmlType t) {
    int blk = 0;
    if (!with_block_format(t, [&](auto f) { blk = decltype(f)::ABLK; }))
        STRATA_CHECK(t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16,
                     "cuda matmul: unsupported weight type ", ggml_type_name(t));
    return blk;
}

int64_t matmul_q6k_t1_calls() { return g_q6k_t1_calls.load(); }
int64_t matmul_t1_staged_calls() { return g_t1_staged_calls.load(); }

void quantize_act(cudaStream_t s, int block, const float* x, int rows, int n, ActQ8 a) {
    STRATA_CHECK(n % block == 0, "cuda quantize_act: row length ", n, " is not a multiple of the block ", block);
    const int64_t n_blocks = (int64_t)rows * n / block;
    const int warps = 8;
    const unsigned grid = grid_for(n_blocks, warps);
    if (block == 32) launch_kernel(quantize_act_kernel<32>, grid, warps * 32, 0, s, pdl_enabled(), x, n_blocks, a.q, a.d);
    else launch_kernel(quantize_act_kernel<256>, grid, warps * 32, 0, s, pdl_enabled(), x, n_blocks, a.q, a.d);
    CUDA_CHECK_LAUNCH();
}

void matmul(cudaStream_t s, const MatmulArgs& m, const float* x, ActQ8 act, int P, float* y) {
    STRATA_CHECK(P > 0 && P <= 65535 * (m.ids ? 1 : kTile), "cuda matmul: ", P, " activation rows is out of range");
    if (m.rows == 0) return;
    if (matmul_tiled(s, m, x, act, P, y)) return;   // prompt-sized P on one matrix (matmul_tiled.cu)
    switch (m.type) {
    case GgmlType::F32: launch_plain<kF32>(s, m, x, P, y); return;
    case GgmlType::F16: launch_plain<kF16>(s, m, x, P, y); return;
    case GgmlType::BF16: launch_plain<kBF16>(s, m, x, P, y); return;
    default: break;
    }
    if (!with_block_format(m.type, [&](auto f) { launch_block<decltype(f)>(s, m, x, act, P, y); }))
        fail("cuda matmul: unsupported weight type ", ggml_type_name(m.type));
}

bool matmul_fused_quant(cudaStream_t s, const MatmulArgs& m, const float* x, int P, float* y) {
    if (m.rows == 0 || P <= 0 || P > 65535 || act_block(m.type) == 0) return false;
    bool done = false;
    with_block_format(m.type, [&](auto f) {
        using F = decltype(f);
        const size_t smem = fused_smem<F>(m, P);
        if (!smem) return;
        launch_q8<F, true>(s, m, x, ActQ8{}, P, y, smem);
        CUDA_CHECK_LAUNCH();
        done = true;
    });
    return done;
}

bool moe_gate_up(cudaStream_t s, const MatmulArgs& gate, const MatmulArgs& up, ActQ8 act, int P, float* h) {
    if (!act.q || !gate.ids || gate.ids != up.ids || gate.type != up.type || gate.row_bytes != up.row_bytes ||
        gate.rows != up.rows || gate.n != up.n || gate.mat_stride != up.mat_stride || gate.act_div != up.act_div)
        return false;
    if (P == 0 || gate.rows == 0) return true;
    STRATA_CHECK(P <= 65535, "cuda moe_gate_up: ", P, " pairs is out of range");
    bool done = false;
    with_block_format(gate.type, [&](auto f) {
        using F = decltype(f);
        if constexpr (QInt<F>::kHas) {
            STRATA_CHECK(gate.n % F::QK == 0, "cuda moe_gate_up: row length ", gate.n, " is not a multiple of the ",
                         ggml_type_name(gate.type), " block of ", F::QK);
            auto launch = [&](auto kernel, std::atomic<unsigned>& known) {
                const dim3 grid = row_grid(gate.rows, (unsigned)P, resident_blocks(s, kernel, known));
                kernel<<<grid, kWarps * 32, 0, s>>>(gate.w, up.w, gate.row_bytes, gate.rows, gate.n, gate.mat_stride,
                                                    gate.ids, gate.act_div, act.q, act.d, P, h);
            };
            static std::atomic<unsigned> known1{0}, known4{0};
            if (P > kGroupAbove) launch(moe_gate_up_kernel<F, kGroupTile>, known4);
            else launch(moe_gate_up_kernel<F, 1>, known1);
            CUDA_CHECK_LAUNCH();
            done = true;
        }
    });
    return done;
}

void dequant_rows(cudaStream_t s, GgmlType type, const uint8_t* w, size_t row_bytes, int n, const int32_t* ids, int T,
                  float* y) {
    if (T == 0) return;
    const int threads = 128;
    switch (type) {
    case GgmlType::F32: dequant_rows_plain_kernel<kF32><<<T, threads, 0, s>>>(w, row_bytes, n, ids, y); break;
    case GgmlType::F16: dequant_rows_plain_kernel<kF16><<<T, threads, 0, s>>>(w, row_bytes, n, ids, y); break;
    case GgmlType::BF16: dequant_rows_plain_kernel<kBF16><<<T, threads, 0, s>>>(w, row_bytes, n, ids, y); break;
    default:
        if (!with_block_format(type, [&](auto f) {
                STRATA_CHECK(n % decltype(f)::QK == 0, "cuda embed: row length ", n, " is not a multiple of the ",
                             ggml_type_name(type), " block");
                dequant_rows_kernel<decltype(f)><<<T, threads, 0, s>>>(w, row_bytes, n, ids, y);
            }))
            fail("cuda embed: unsupported table type ", ggml_type_name(type));
    }
    CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
