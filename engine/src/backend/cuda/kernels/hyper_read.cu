// Backend::hyper_read in two kernels, sized to fill the GPU at T = 1: (1) per column chunk of the n·H inputs and group
// of 8 rows, the grouped RMSNorm of the chunk (with its Q8 quantization) as a prologue, then the down and inject
// partial dots; (2) per 16-lane group one up row (s, j): silu of the summed partials, σ(up · a), the mean over streams.
// A block computes one token; up to kWindowTokens tokens (a verify window) run side by side on gridDim.z, each with a
// one-token call's bits. Partial sums are added in a fixed order (no atomics): results are the same run to run.
// hyper_inject_read folds the previous sub-block's injection X += inj ⊗ y into kernel 1's reads of X (kernel 2 writes
// the new X back).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "backend/cuda/kernels/hyper_read_common.cuh"
#include "backend/cuda/kernels/hyper_read_v1.cuh"
#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/kernels/t1_variants.h"
#include "common/env.h"
#include "common/error.h"

namespace strata::cuda {

namespace {

using namespace hr;

constexpr int kRowsPerWarp = 1;           // down / inject rows per warp in kernel 1
constexpr int kBlockRows = kRowsPerWarp * kThreads / 32;
constexpr int kMaxChunk = 2560;           // inputs per kernel-1 block (a multiple of 256 dividing n·H)
                                          // STRATA_CUDA_HR_CHUNK overrides it (an A/B of the block shape)
constexpr int kSmemMax = 48 * 1024;       // dynamic shared memory without opting in
constexpr int kGroup = 16;                // lanes per up row in kernel 2 (r = 320 is 10 chunks of 32)
constexpr int kMixThreads = 640;         // kernel 2's block where 16·n divides it (n = 4: 10 columns, 256 blocks at
                                          // H 2560): every block redoes the prologue, so fewer, larger blocks cut its
                                          // share: 5.86 µs a call against 6.78 with 256 threads (r62, Nsight)
constexpr int kMixMaxThreads = 1024;      // STRATA_CUDA_HR_MIX_THREADS (a multiple of 16·n up to this): A/B
constexpr int kMixMaxGroups = kMixMaxThreads / kGroup;

std::atomic<int64_t> g_fused{0};
std::atomic<int> g_one_pass{-1};   // kernel 1's one-pass prologue: -1 = STRATA_CUDA_HR_ONE_PASS (default on)
std::atomic<int64_t> g_folded{0};  // hyper_inject_read calls with the injection folded into kernel 1

// Kernel 1's shared memory for T tokens of a chunk of cw inputs: Q8 (blk > 0) int8 values + scales, else f32 values
// at a row stride of 33 per 32 (lanes read different 32-input units: the padding spreads them over the banks).
size_t down_smem(int T, int cw, int blk) {
    return blk ? align256((size_t)T * cw) + (size_t)T * (cw / blk) * sizeof(float)
               : (size_t)T * (cw / 32) * 33 * sizeof(float);
}

// Four values as the int8 bytes of one word (kernel 1's prologues): quantize_act's rounding, Q8_K's clamp to ±127.
template <int BLK>
__device__ __forceinline__ uint32_t pack4_q8(const float* v, float id) {
    uint32_t word = 0;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
        float r = rintf(v[b] * id);
        if (BLK == 256) r = fminf(127.0f, fmaxf(-127.0f, r));
        word |= (uint32_t)(uint8_t)(int8_t)(int)r << (8 * b);
    }
    return word;
}

// Quad q (inputs 4q … 4q + 3): y = x · wv, and the Σx² and max |y| of the quad's 32-input unit (8 consecutive lanes,
// by shuffles) stored by the unit's first lane into unit_ss / unit_amax. Every lane of the warp calls it.
__device__ __forceinline__ float4 unit_stats_quad(float4 x, float4 wv, bool valid, int q, float* unit_ss,
                                                  float* unit_amax) {
    float ss = x.x * x.x + x.y * x.y + x.z * x.z + x.w * x.w;
    const float4 y = make_float4(x.x * wv.x, x.y * wv.y, x.z * wv.z, x.w * wv.w);
    float am = fmaxf(fmaxf(fabsf(y.x), fabsf(y.y)), fmaxf(fabsf(y.z), fabsf(y.w)));
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) {   // the unit's 8 lanes
        ss += __shfl_xor_sync(0xffffffffu, ss, o);
        am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, o));
    }
    if (valid && (q & 7) == 0) {
        unit_ss[q / 8] = ss;
        unit_amax[q / 8] = am;
    }
    return y;
}

// Quad q (inputs 4q … 4q + 3) of y = x · w normalised by iv and quantized with quantize_act's arithmetic: its block's
// amax is the max |y| of the block's 32-input units (unit_amax) times iv; the int8 word goes to xq, the block's scale
// to xd from the block's first quad. Returns the normalised values.
template <int BLK>
__device__ __forceinline__ float4 quantize_quad(float4 y, float iv, const float* unit_amax, int q, int8_t* xq,
                                                float* xd) {
    constexpr int kUnits = BLK / 32;
    const float v[4] = {y.x * iv, y.y * iv, y.z * iv, y.w * iv};
    const int u0 = q / 8 / kUnits * kUnits, c = 4 * q;
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < kUnits; ++k) amax = fmaxf(amax, unit_amax[u0 + k]);
    amax *= iv;
    const float dd = amax / 127.0f;
    const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
    ((uint32_t*)xq)[q] = pack4_q8<BLK>(v, id);
    if (c % BLK == 0) xd[c / BLK] = BLK == 32 ? __half2float(__float2half_rn(dd)) : dd;
    return make_float4(v[0], v[1], v[2], v[3]);
}

// Inputs of kernel 1 with a pending injection (hyper_inject_read): the streams as hyper_inject leaves them,
// X[t, s·H + j] + inj[t, s] · y[t, j] (the same fmaf), computed where X is read; plain X when y is null.
struct PendingInject {
    const float* inj = nullptr;   // [T, n]
    const float* y = nullptr;     // [T, H], 16-byte aligned, H % 4 == 0
    float* x_new = nullptr;       // [T, n·H] scratch: kernel 1's row-group-0 blocks write the new X there, kernel 2
                                  // copies it over X
};

// X[t, c … c + 3] (c % 4 == 0; the four lie in one stream as H % 4 == 0) after the pending injection.
__device__ __forceinline__ float4 load_x4(const float* __restrict__ X, const PendingInject& pi, int t, int c, int n,
                                          int H) {
    float4 x = *(const float4*)(X + (size_t)t * n * H + c);
    if (pi.y) {
        const float a = pi.inj[t * n + c / H];
        const float4 v = *(const float4*)(pi.y + (size_t)t * H + c % H);
        x.x = fmaf(a, v.x, x.x);
        x.y = fmaf(a, v.y, x.y);
        x.z = fmaf(a, v.z, x.z);
        x.w = fmaf(a, v.w, x.w);
    }
    return x;
}
__device__ __forceinline__ float load_x1(const float* __restrict__ X, const PendingInject& pi, int t, int c, int n,
                                         int H) {
    const float x = X[(size_t)t * n * H + c];
    return pi.y ? fmaf(pi.inj[t * n + c / H], pi.y[(size_t)t * H + c % H], x) : x;
}

// Kernel 1's prologue when the chunk is whole streams (cw % H == 0, H % BLK == 0): one pass over X. Each group of
// 8 lanes takes a 32-input unit as float4s: x·w kept in registers, the unit's Σx² and max |x·w| by shuffles into
// shared memory; after one barrier a warp sums a stream's units (fixed order); after another every thread scales its
// x·w by its stream's 1/rms and quantizes them with quantize_act's arithmetic (the block's amax from the units' max
// |x·w| times 1/rms). The same values as the two-pass prologue within float rounding.
constexpr int kWindowTokens = 4;   // tokens of a token grid (a verify window of up to 3 drafts)
constexpr int kOnePassQuads = (kMaxChunk / 4 + kThreads - 1) / kThreads;   // float4s a thread

template <int BLK>
__device__ __forceinline__ void down_prologue_one_pass(const float* __restrict__ X, const PendingInject& pi, int n,
                                                       const float* __restrict__ w, int w_len, int H, float eps,
                                                       int c0, int cw, bool write_xn, float* __restrict__ xn,
                                                       int8_t* xq, float* xd) {
    __shared__ float unit_ss[kMaxChunk / 32], unit_amax[kMaxChunk / 32];
    __shared__ float inv_s[kMaxStreams];
    const int quads = cw / 4, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float4 y[kOnePassQuads];
#pragma unroll
    for (int it = 0; it < kOnePassQuads; ++it) {
        const int q = it * kThreads + threadIdx.x, c = c0 + 4 * q;
        const bool valid = q < quads;
        const float4 x = valid ? load_x4(X, pi, 0, c, n, H) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (valid && write_xn && pi.x_new) ((float4*)pi.x_new)[c / 4] = x;
        const float4 wv = valid && w ? ((const float4*)w)[(c % w_len) / 4] : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
        y[it] = unit_stats_quad(x, wv, valid, q, unit_ss, unit_amax);
    }
    __syncthreads();
    const int units_per_stream = H / 32, ns = cw / H;
    for (int si = warp; si < ns; si += kThreads / 32) {   // a warp a stream
        float ss = 0.0f;
        for (int u = lane; u < units_per_stream; u += 32) ss += unit_ss[si * units_per_stream + u];
        ss = warp_sum(ss);
        if (lane == 0) inv_s[si] = 1.0f / sqrtf(ss / H + eps);
    }
    __syncthreads();
#pragma unroll
    for (int it = 0; it < kOnePassQuads; ++it) {
        const int q = it * kThreads + threadIdx.x;
        if (q >= quads) break;
        const float4 v = quantize_quad<BLK>(y[it], inv_s[4 * q / H], unit_amax, q, xq, xd);
        if (write_xn) ((float4*)xn)[(c0 + 4 * q) / 4] = v;
    }
}

// ---- kernel 1: grid (n·H / cw chunks, row groups of kBlockRows, tokens): block (c, g, z) takes token z (a token
// grid: each token of a window exactly as a one-token call). Prologue: the sums of squares of the streams the chunk
// touches (whole streams, each block for itself), the chunk normalised (and quantized in blocks of BLK) into shared
// memory; blocks of row group 0 also write xn for kernel 2 (with whole streams a chunk and a Q8 mode:
// down_prologue_one_pass above, when one_pass). Then one warp per row: part[(z·chunks + c)·R + row].
template <class F, int BLK>
__global__ void __launch_bounds__(kThreads)
hr_down_kernel(const float* __restrict__ X, const float* __restrict__ w, int w_len, int n, int H, float eps, int cw,
               const uint8_t* __restrict__ down, size_t down_rb, const uint8_t* __restrict__ inject, size_t inj_rb,
               int r, int R, bool one_pass, PendingInject pi, float* __restrict__ xn, float* __restrict__ part) {
    extern __shared__ int4 smem4[];
    __shared__ float inv[kMaxStreams];
    const int nH = n * H, c0 = blockIdx.x * cw, units = cw / 32;
    if (const int z = blockIdx.z) {   // token z's rows of every array
        X += (size_t)z * nH;
        if (pi.y) pi.inj += z * n, pi.y += (size_t)z * H, pi.x_new += (size_t)z * nH;
        xn += (size_t)z * nH;
        part += (size_t)z * gridDim.x * R;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    constexpr int kSub = F::QK / 32;

    // The weights are read after the prologue: ask for their lines now.
    const int row0 = blockIdx.y * kBlockRows + warp * kRowsPerWarp;
    for (int i = 0; i < kRowsPerWarp; ++i) {
        const int row = row0 + i;
        if (row >= R) break;
        const uint8_t* wr = row < r ? down + (size_t)row * down_rb : inject + (size_t)(row - r) * inj_rb;
        for (int u = lane; u < units; u += 32) prefetch_l2(wr + (size_t)((c0 / 32 + u) / kSub) * F::BYTES);
    }
    pdl_launch_dependents();
    pdl_wait();   // X (as the previous kernel's programmatic dependent: only the prefetch came before)
    X = pdl_dep(X);
    pi.inj = pdl_dep(pi.inj);
    pi.y = pdl_dep(pi.y);

    int8_t* xq = (int8_t*)smem4;                                   // [cw]
    float* xd = (float*)((uint8_t*)smem4 + align256((size_t)cw));  // [cw / BLK]
    float* xf = (float*)smem4;                                     // [cw / 32, 33]
    const bool write_xn = blockIdx.y == 0;
    if constexpr (BLK > 0) {
        if (one_pass) down_prologue_one_pass<BLK>(X, pi, n, w, w_len, H, eps, c0, cw, write_xn, xn, xq, xd);
    }
    if (!(BLK > 0 && one_pass)) {
    // Sums of squares: every load in flight together, one barrier for every stream.
    __shared__ float red[kMaxStreams][kThreads / 32];
    const int s_first = c0 / H, s_last = (c0 + cw - 1) / H, ns = s_last - s_first + 1;
    for (int s = s_first; s <= s_last; ++s) {
        float ss = 0.0f;
        if ((H & 3) == 0)
#pragma unroll 4   // the loads of several steps in flight together (the sums keep their order)
            for (int j = threadIdx.x; j < H / 4; j += blockDim.x) {
                const float4 v = load_x4(X, pi, 0, s * H + 4 * j, n, H);
                ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
            }
        else
            for (int j = threadIdx.x; j < H; j += blockDim.x) {
                const float v = load_x1(X, pi, 0, s * H + j, n, H);
                ss += v * v;
            }
        const float v = warp_sum(ss);
        if (lane == 0) red[s - s_first][warp] = v;
    }
    __syncthreads();
    if (threadIdx.x < ns) {
        float ss = 0.0f;
        for (int k = 0; k < kThreads / 32; ++k) ss += red[threadIdx.x][k];
        inv[threadIdx.x] = 1.0f / sqrtf(ss / H + eps);
    }
    __syncthreads();

    if constexpr (BLK > 0) {
        // One thread per 32 consecutive inputs; the SG = BLK / 32 threads of an activation block are consecutive
        // lanes and share its amax by shuffles. Every thread runs every round (the shuffles take the whole warp);
        // quantize_block's arithmetic.
        constexpr int SG = BLK / 32;
        for (int it = 0; it < (units + kThreads - 1) / kThreads; ++it) {
            const int uu0 = it * kThreads + threadIdx.x;
            const bool valid = uu0 < units;
            const int uu = valid ? uu0 : 0, cs = c0 + 32 * uu;
            const int s0 = cs / H, next = (s0 + 1) * H;   // the stream of the unit's first input, where the next starts
            float v[32];
            float amax = 0.0f;
#pragma unroll
            for (int e4 = 0; e4 < 8; ++e4) {
                const float4 xv = valid ? load_x4(X, pi, 0, cs + 4 * e4, n, H) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (valid && write_xn && pi.x_new) *(float4*)(pi.x_new + cs + 4 * e4) = xv;
                const float xs[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const int c = cs + 4 * e4 + q;
                    float y = xs[q] * inv[(c < next ? s0 : c / H) - s_first];
                    if (w) y *= w[w_len == nH ? c : c % w_len];
                    v[4 * e4 + q] = y;
                    amax = fmaxf(amax, fabsf(y));
                }
            }
#pragma unroll
            for (int o = 1; o < SG; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
            if (!valid) continue;
            if (write_xn) {
                float4* xo = (float4*)(xn + cs);
#pragma unroll
                for (int e4 = 0; e4 < 8; ++e4) xo[e4] = make_float4(v[4 * e4], v[4 * e4 + 1], v[4 * e4 + 2], v[4 * e4 + 3]);
            }
            const float dd = amax / 127.0f;
            const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
            int packed[8];
#pragma unroll
            for (int k = 0; k < 8; ++k) packed[k] = (int)pack4_q8<BLK>(v + 4 * k, id);
            int4* qo = (int4*)(xq + 32 * uu);
            qo[0] = make_int4(packed[0], packed[1], packed[2], packed[3]);
            qo[1] = make_int4(packed[4], packed[5], packed[6], packed[7]);
            if (uu % SG == 0) xd[(32 * uu) / BLK] = BLK == 32 ? __half2float(__float2half_rn(dd)) : dd;
        }
    } else {
        for (int cc = threadIdx.x; cc < cw; cc += kThreads) {
            const int c = c0 + cc;
            const float x = load_x1(X, pi, 0, c, n, H);
            if (write_xn && pi.x_new) pi.x_new[c] = x;
            float y = x * inv[c / H - s_first];
            if (w) y *= w[c % w_len];
            xf[(cc / 32) * 33 + cc % 32] = y;
            if (write_xn) xn[c] = y;
        }
    }
    }   // the two-pass prologue
    __syncthreads();

    for (int i = 0; i < kRowsPerWarp; ++i) {
        const int row = row0 + i;
        if (row >= R) break;   // the whole warp
        const uint8_t* wr = row < r ? down + (size_t)row * down_rb : inject + (size_t)(row - r) * inj_rb;
        float acc[1] = {0.0f};
#pragma unroll 4
        for (int u = lane; u < units; u += 32) {
            const int gu = c0 / 32 + u;   // unit of the whole row
            const uint8_t* blk = wr + (size_t)(gu / kSub) * F::BYTES;
            if constexpr (BLK > 0) {
                const auto act = [&](int, int (&a)[8]) -> float {
                    const int4* q4 = (const int4*)(xq + 32 * u);
                    const int4 lo = q4[0], hi = q4[1];
                    a[0] = lo.x; a[1] = lo.y; a[2] = lo.z; a[3] = lo.w;
                    a[4] = hi.x; a[5] = hi.y; a[6] = hi.z; a[7] = hi.w;
                    return xd[(32 * u) / BLK];
                };
                QDot<F>::template dot<1>(blk, gu % kSub, QDot<F>::global_grid(), act, 1, acc);
            } else {
                float wv[32];
                F::deq32(blk, gu % kSub, wv);
                const float* xr = xf + u * 33;
                float s = 0.0f;
#pragma unroll
                for (int e = 0; e < 32; ++e) s = fmaf(wv[e], xr[e], s);
                acc[0] += s;
            }
        }
        const float v = warp_sum(acc[0]);
        if (lane == 0) part[(size_t)blockIdx.x * R + row] = v;
    }
}

// ---- kernel 2: grid (⌈H / J⌉, 1, tokens), J = (threads / 16) / n columns per block; group g = (column jl, stream s)
// takes up row s·H + j of token z = blockIdx.z. Prologue (every block): a [r] = silu(Σ partials / n) in shared
// memory, its Q8 form (Q8) when the up weight is a block format; block 0 writes inj = 2σ(Σ partials / n). Then
// m = σ(up row · a), and u[j] = (1/n) Σ_s m · xn in stream order. PLAIN: F32 / F16 / BF16 up rows (element loop, any
// r). With x_new (an injection folded into kernel 1) each group also copies its row of the new streams over X.
template <class F, bool Q8, bool PLAIN>
__global__ void __launch_bounds__(kMixMaxThreads)
hr_mix_kernel(const float* __restrict__ part, int chunks, int R, int r, int n, int H, const uint8_t* __restrict__ up,
              size_t up_rb, const float* __restrict__ xn, float* __restrict__ u, float* __restrict__ inj,
              const float* __restrict__ x_new, float* __restrict__ X) {
    extern __shared__ int4 smem4[];
    __shared__ float val[kMixMaxGroups];                       // m · xn of each group's row
    float* a = (float*)smem4;                                  // [r]
    int8_t* aq = (int8_t*)(a + r);                             // [r] (16-byte aligned: r % 32 == 0 when Q8)
    float* ad = (float*)(aq + r);                              // [r / ABLK]
    const int nH = n * H;
    if (const int z = blockIdx.z) {   // token z's rows of every array
        part += (size_t)z * chunks * R;
        xn += (size_t)z * nH;
        u += (size_t)z * H;
        if (inj) inj += z * n;
        if (x_new) x_new += (size_t)z * nH;
        if (X) X += (size_t)z * nH;
    }
    const int lane = threadIdx.x & 31, g = lane % kGroup, gi = threadIdx.x / kGroup;
    const int J = (int)(blockDim.x / kGroup) / n, jl = gi / n, s = gi % n;
    const int j = blockIdx.x * J + jl;
    const bool active = gi < J * n && j < H;
    const int row = s * H + min(j, H - 1);   // every lane runs the dot (group shuffles); only active groups keep it
    const uint8_t* wr = up + (size_t)row * up_rb;
    if constexpr (!PLAIN) {
        constexpr int kSub = F::QK / 32;
        if (g < r / 32) prefetch_l2(wr + (size_t)(g / kSub) * F::BYTES);
    } else if (g == 0) {
        prefetch_l2(wr);
    }
    pdl_wait();   // kernel 1's part and xn (as its programmatic dependent: only the prefetch came before)
    part = pdl_dep(part);
    xn = pdl_dep(xn);
    x_new = pdl_dep(x_new);
    const float xv = g == 0 ? __ldcg(xn + row) : 0.0f;   // this row's xn, loaded while the prologue runs
    if (x_new && g == 0 && active) X[row] = __ldcg(x_new + row);   // the injected streams over X: a group's row

    mix_prologue<F, Q8>(part, chunks, R, r, n, 1, blockIdx.x == 0 ? inj : nullptr, a, aq, ad);

    float acc[1] = {0.0f};
    up_row_dot<F, Q8, PLAIN, 1, kGroup>(wr, r, g, 1, a, aq, ad, acc);
    const float dot = group_sum<kGroup>(acc[0]);
    if (g == 0 && active) val[gi] = 1.0f / (1.0f + expf(-dot)) * xv;
    __syncthreads();
    for (int c = threadIdx.x; c < J; c += blockDim.x) {
        const int jj = blockIdx.x * J + c;
        if (jj >= H) continue;
        float sum = 0.0f;
        for (int k = 0; k < n; ++k) sum += val[c * n + k];
        u[jj] = sum / (float)n;
    }
}

// Which path: the two kernels above (default) or the older three (STRATA_CUDA_HYPER_READ=v1).
bool use_v1() {
    static const bool v1 = [] {
        const char* v = std::getenv("STRATA_CUDA_HYPER_READ");
        return v && std::strcmp(v, "v1") == 0;
    }();
    return v1;
}

bool fused_enabled() {
    static const bool on = env_switch("STRATA_CUDA_FUSED_HYPER", true);
    return on;
}

bool one_pass_on() {
    int v = g_one_pass.load();
    if (v < 0) {
        const char* e = std::getenv("STRATA_CUDA_HR_ONE_PASS");
        v = e && std::strcmp(e, "0") == 0 ? 0 : 1;
        g_one_pass.store(v);
    }
    return v == 1;
}

// STRATA_CUDA_INJECT_FOLD=0: hyper_inject_read as hyper_inject + hyper_read (an A/B of the fold); read once.
bool inject_fold_on() {
    static const bool on = env_switch("STRATA_CUDA_INJECT_FOLD", true);
    return on;
}

// Kernel 2's threads a block for n streams: STRATA_CUDA_HR_MIX_THREADS when it is a multiple of 16·n up to 1024,
// else kMixThreads when 16·n divides it, else 256 (kThreads). The variable is read once.
int mix_threads_for(int n) {
    static const int asked = [] {
        const char* v = std::getenv("STRATA_CUDA_HR_MIX_THREADS");
        return v ? std::atoi(v) : 0;
    }();
    auto fits = [&](int threads) {
        return threads >= kGroup * n && threads <= kMixMaxThreads && threads % (kGroup * n) == 0;
    };
    if (fits(asked)) return asked;
    return fits(kMixThreads) ? kMixThreads : kThreads;
}


struct Layout {
    size_t xn = 0, part = 0, x_new = 0, total = 0;   // byte offsets in the scratch
    int cw = 0, chunks = 0, R = 0, blk = 0;
};

// Chunk width: the largest multiple of 256 up to kMaxChunk dividing n·H whose kernel-1 shared memory fits (one token
// a block up to kWindowTokens: every token of a window gets the chunks of a one-token call). part holds T tables.
Layout layout(const HyperReadArgs& a, int T, bool with_inj) {
    Layout l;
    const int nH = a.n * a.H;
    l.R = a.r + (with_inj ? a.n : 0);
    l.blk = hr_act_block(a.down_type, a.f32_act);
    static const int max_chunk = [] {
        const char* v = std::getenv("STRATA_CUDA_HR_CHUNK");
        return v ? std::max(256, std::atoi(v)) : kMaxChunk;
    }();
    for (int cw = std::min(nH, max_chunk) / 256 * 256; cw >= 256 && !l.cw; cw -= 256)
        if (nH % cw == 0 && down_smem(T <= kWindowTokens ? 1 : T, cw, l.blk) <= (size_t)kSmemMax) l.cw = cw;
    l.chunks = l.cw ? nH / l.cw : 0;
    l.part = align256((size_t)T * nH * sizeof(float));
    l.x_new = l.part + align256((size_t)l.chunks * T * l.R * sizeof(float));
    l.total = l.x_new + align256((size_t)T * nH * sizeof(float));
    return l;
}

size_t mix_smem(const HyperReadArgs& a, int T, int blk_up) {
    return (size_t)T * a.r * sizeof(float) + align256((size_t)T * a.r) +
           (blk_up ? (size_t)T * (a.r / blk_up) * sizeof(float) : 0);
}

}  // namespace

bool hyper_read_supported(const HyperReadArgs& a, int T) {
    if (!fused_enabled() || T < 1 || T > kMaxTokens || a.n < 1 || a.n > kMaxStreams || a.r < 1 || a.r > kMaxRank)
        return false;
    if ((a.n * a.H) % 256 != 0 || !a.norm || !a.down || !a.up) return false;
    if (a.inject && a.inject_type != a.down_type) return false;
    const int qd = qk_of(a.down_type), qu = qk_of(a.up_type);
    if (!qd || !qu || (a.n * a.H) % qd != 0) return false;
    if (!is_plain(a.up_type) && a.r % qu != 0) return false;
    // kernel 1: a chunk of ≥ 256 inputs whose streams fit its table; kernel 2: a and its Q8 form in shared memory
    const Layout l = layout(a, T, a.inject != nullptr);
    if (!l.cw || (l.cw - 1) / a.H + 2 > kMaxStreams) return false;
    return mix_smem(a, T, is_plain(a.up_type) ? 0 : hr_act_block(a.up_type, a.f32_act)) <= (size_t)kSmemMax;
}

size_t hyper_read_scratch_bytes(const HyperReadArgs& a, int T) {
    const bool with_inj = a.inject != nullptr;
    return std::max(layout(a, T, with_inj).total, hr_v1::layout(a, T, with_inj).total);
}

int64_t hyper_read_fused_calls() { return g_fused.load(); }

void hyper_read_upload_tables() {
    CUDA_CHECK(cudaMemcpyToSymbol(d_iq2xxs_grid, iq::iq2xxs_grid, sizeof(iq::iq2xxs_grid)));
    CUDA_CHECK(cudaMemcpyToSymbol(d_iq2xs_grid, iq::iq2xs_grid, sizeof(iq::iq2xs_grid)));
    CUDA_CHECK(cudaMemcpyToSymbol(d_iq2s_grid, iq::iq2s_grid, sizeof(iq::iq2s_grid)));
    CUDA_CHECK(cudaMemcpyToSymbol(d_iq3xxs_grid, iq::iq3xxs_grid, sizeof(iq::iq3xxs_grid)));
    CUDA_CHECK(cudaMemcpyToSymbol(d_iq3s_grid, iq::iq3s_grid, sizeof(iq::iq3s_grid)));
    CUDA_CHECK(cudaMemcpyToSymbol(d_ksigns_iq2xs, iq::ksigns_iq2xs, sizeof(iq::ksigns_iq2xs)));
    CUDA_CHECK(cudaMemcpyToSymbol(d_kvalues_iq4nl, iq::kvalues_iq4nl, sizeof(iq::kvalues_iq4nl)));
}


void hyper_read_set_one_pass(int mode) { g_one_pass.store(mode < 0 ? -1 : mode ? 1 : 0); }

void hyper_read_v1(cudaStream_t s, const HyperReadArgs& a, const float* X, int T, void* scratch, float* u, float* inj) {
    STRATA_CHECK(hyper_read_supported(a, T), "cuda hyper_read_v1: shape n=", a.n, " H=", a.H, " r=", a.r, " T=", T,
                 " or weight types ", ggml_type_name(a.down_type), "/", ggml_type_name(a.up_type), " not supported");
    hr_v1::run(s, a, X, T, scratch, u, inj);
    g_fused.fetch_add(1, std::memory_order_relaxed);
}

namespace {

int hyper_pdl_bits() {
    static const int bits = [] {
        const char* e = std::getenv("STRATA_CUDA_HYPER_PDL");
        return e ? std::atoi(e) & 3 : 0;
    }();
    return bits;
}

// (kernel 1 reads X as float4s: an unaligned X, which no caller makes today, takes the older kernels)
// T > kWindowTokens also takes them: with the two-pass prologue the two kernels were slower at T = 8 on the H200
// (65 vs 45 µs; t1_ops.json of tests/gpu/results/2026-11-30-round2), faster at T = 1 (13.8 vs 20.5) and T = 2
// (23.8 vs 26.4). Up to kWindowTokens they run as a token grid (a verify window: each token as at T = 1).
bool two_kernel_path(const float* X, int T) {
    return !use_v1() && T <= kWindowTokens && reinterpret_cast<uintptr_t>(X) % 16 == 0;
}

// The two kernels, one token a block: T ≤ kWindowTokens tokens as a token grid (gridDim.z = T), so every token of a
// verify window is computed exactly as a one-token call (measured against the earlier kernels that took all of a
// window's tokens in every block: hyper_inject_read 0.95 → 0.53 ms more a window of 2 than a plain step, 1.77 → 1.51
// a window of 4; H100, r107). With X_out (hyper_inject_read) kernel 1 reads the streams after the injection pi and
// kernel 2 copies them over X_out (the same array as X).
void run_two_kernels(cudaStream_t s, const HyperReadArgs& a, const float* X, int T, void* scratch, float* u,
                     float* inj, PendingInject pi, float* X_out) {
    STRATA_CHECK(hyper_read_supported(a, T), "cuda hyper_read: shape n=", a.n, " H=", a.H, " r=", a.r, " T=", T,
                 " or weight types ", ggml_type_name(a.down_type), "/", ggml_type_name(a.up_type), " not supported");
    STRATA_CHECK(T >= 1 && T <= kWindowTokens, "cuda hyper_read: ", T, " tokens in the two-kernel path");
    const bool with_inj = inj != nullptr;
    STRATA_CHECK(!with_inj || a.inject, "cuda hyper_read: inj requested without an inject weight");
    const Layout l = layout(a, T, with_inj);
    uint8_t* base = static_cast<uint8_t*>(scratch);
    float* xn = (float*)base;
    float* part = (float*)(base + l.part);
    if (pi.y) pi.x_new = (float*)(base + l.x_new);

    // As programmatic dependent launches only by STRATA_CUDA_HYPER_PDL (bit 1 kernel 1, bit 2 kernel 2; default 0):
    // correct since their inputs go through pdl_dep / __ldcg (r74, r75), but decode measured no gain (r75).
    const int hyper_pdl = pdl_enabled() ? hyper_pdl_bits() : 0;
    const bool pdl1 = hyper_pdl & 1, pdl2 = hyper_pdl & 2;
    // kernel 1's one-pass prologue: Q8 activations, whole streams a chunk, blocks inside a stream, float4 norm
    const bool one_pass = l.blk > 0 && one_pass_on() && l.cw <= kMaxChunk && l.cw % a.H == 0 && a.H % l.blk == 0 &&
                          l.cw / a.H <= kThreads / 32 && a.norm_len % 4 == 0 &&
                          reinterpret_cast<uintptr_t>(a.norm) % 16 == 0;
    const dim3 down_grid((unsigned)l.chunks, (unsigned)((l.R + kBlockRows - 1) / kBlockRows), (unsigned)T);
    const size_t smem1 = down_smem(1, l.cw, l.blk);
    with_hr_format(a.down_type, [&](auto f) {
        using F = decltype(f);
        auto launch = [&](auto kernel) {
            launch_kernel(kernel, down_grid, kThreads, smem1, s, pdl1, X, (const float*)a.norm, a.norm_len, a.n, a.H,
                          a.eps, l.cw, a.down, a.down_rb, a.inject, a.inject_rb, a.r, l.R, one_pass, pi, xn, part);
        };
        if constexpr (F::ABLK == 32 || F::ABLK == 256) {
            if (l.blk) {
                launch(hr_down_kernel<F, F::ABLK>);
                return;
            }
        }
        launch(hr_down_kernel<F, 0>);
    });
    CUDA_CHECK_LAUNCH();

    const int blk_up = is_plain(a.up_type) ? 0 : hr_act_block(a.up_type, a.f32_act);
    const size_t smem2 = mix_smem(a, 1, blk_up);
    const int mix_threads = mix_threads_for(a.n);
    const int J = mix_threads / kGroup / a.n;
    const dim3 mix_grid((unsigned)((a.H + J - 1) / J), 1, (unsigned)T);
    with_hr_format(a.up_type, [&](auto f) {
        using F = decltype(f);
        auto launch = [&](auto kernel) {
            launch_kernel(kernel, mix_grid, (unsigned)mix_threads, smem2, s, pdl2, (const float*)part, l.chunks, l.R,
                          a.r, a.n, a.H, a.up, a.up_rb, (const float*)xn, u, with_inj ? inj : nullptr,
                          (const float*)pi.x_new, pi.y ? X_out : nullptr);
        };
        if constexpr (F::ABLK == 0) launch(hr_mix_kernel<F, false, true>);
        else if (blk_up) launch(hr_mix_kernel<F, true, false>);
        else launch(hr_mix_kernel<F, false, false>);
    });
    CUDA_CHECK_LAUNCH();
    g_fused.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace


void hyper_read(cudaStream_t s, const HyperReadArgs& a, const float* X, int T, void* scratch, float* u, float* inj) {
    if (!two_kernel_path(X, T)) {
        hyper_read_v1(s, a, X, T, scratch, u, inj);
        return;
    }
    run_two_kernels(s, a, X, T, scratch, u, inj, PendingInject{}, nullptr);
}

void hyper_inject_read(cudaStream_t s, const HyperReadArgs& a, float* X, const float* inj_prev, const float* y, int T,
                       void* scratch, float* u, float* inj) {
    const bool fold = two_kernel_path(X, T) && a.H % 4 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0 &&
                      inject_fold_on();
    if (!fold) {
        hyper_inject(s, X, inj_prev, y, T, a.n, a.H);
        hyper_read(s, a, X, T, scratch, u, inj);
        return;
    }
    run_two_kernels(s, a, X, T, scratch, u, inj, PendingInject{inj_prev, y, nullptr}, X);
    g_folded.fetch_add(1, std::memory_order_relaxed);
}

int64_t hyper_inject_read_folded_calls() { return g_folded.load(); }

}  // namespace strata::cuda
