// The three-kernel hyper_read of commit 0b5733c, kept as the "before" of the T = 1 work (STRATA_CUDA_HYPER_READ=v1 and
// bench/cuda_kernels/t1_ops): grouped norm (5 blocks at n·H 10240), down/inject partial sums, mix. Included only by
// hyper_read.cu; the public launcher there picks it.
#pragma once
#include "backend/cuda/kernels/hyper_read_common.cuh"
#include "backend/cuda/kernels/kernels.h"
#include "common/error.h"

namespace strata::cuda::hr_v1 {

using namespace hr;
using cuda::HyperReadArgs;

constexpr int kNormCols = 8 * 256;  // columns of one token per norm block: 256 per warp
constexpr int kSplitUnits = 64;     // 32-input chunks per partial sum of the down / inject products (2 per lane)
constexpr int kGroup = 16;          // lanes per up row in the mix kernel (r = 320 is 10 chunks)
constexpr int kCols = kThreads / kGroup;   // columns j per mix block

// ---- kernel 1: grid (column chunks of kNormCols, T). Each block sums the squares of all n streams of its token,
// then each warp normalises 256 columns (lane + 32k) and quantizes them in blocks of BLK (0: f32 only).
template <int BLK>
__global__ void __launch_bounds__(kThreads)
hr_norm_kernel(const float* __restrict__ X, const float* __restrict__ w, int w_len, int n, int H, float eps,
               float* __restrict__ xn, int8_t* __restrict__ xq, float* __restrict__ xd) {
    __shared__ float inv[kMaxStreams];
    const int t = blockIdx.y, nH = n * H;
    const float* x = X + (size_t)t * nH;
    for (int s = 0; s < n; ++s) {
        float ss = 0.0f;
        for (int j = threadIdx.x; j < H; j += blockDim.x) ss += x[s * H + j] * x[s * H + j];
        ss = block_sum(ss);
        if (threadIdx.x == 0) inv[s] = 1.0f / sqrtf(ss / H + eps);
    }
    __syncthreads();
    const int lane = threadIdx.x & 31;
    const int c0 = blockIdx.x * kNormCols + (threadIdx.x >> 5) * 256;
    if (c0 >= nH) return;   // the whole warp (nH is a multiple of 256)
    float v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
        const int c = c0 + lane + 32 * k;
        float y = x[c] * inv[c / H];
        if (w) y *= w[c % w_len];
        v[k] = y;
        xn[(size_t)t * nH + c] = y;
    }
    if constexpr (BLK == 256) {
        const float d = quantize_act_block<256>(v, lane, xq + (size_t)t * nH + c0);
        if (lane == 0) xd[((size_t)t * nH + c0) / 256] = d;
    } else if constexpr (BLK == 32) {
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const float vk[1] = {v[k]};
            const float d = quantize_act_block<32>(vk, lane, xq + (size_t)t * nH + c0 + 32 * k);
            if (lane == 0) xd[((size_t)t * nH + c0 + 32 * k) / 32] = d;
        }
    }
}

// ---- kernel 2: one warp per (row, split) of the R = r (down) + n_inj (inject) rows: part[(split·T + t)·R + row]
// = Σ over the split's chunks of row · xn[t]. Q8: integer dots against xq (QDot); otherwise f32 dots against xn.
template <class F, bool Q8, int NT>
__global__ void __launch_bounds__(kThreads)
hr_down_kernel(const uint8_t* __restrict__ down, size_t down_rb, const uint8_t* __restrict__ inject, size_t inj_rb,
               int r, int R, int nH, int T, int splits, const float* __restrict__ xn, const int8_t* __restrict__ xq,
               const float* __restrict__ xd, float* __restrict__ part) {
    const int item = blockIdx.x * (kThreads / 32) + (threadIdx.x >> 5);
    if (item >= R * splits) return;   // the whole warp
    const int row = item % R, split = item / R, lane = threadIdx.x & 31;
    const uint8_t* wr = row < r ? down + (size_t)row * down_rb : inject + (size_t)(row - r) * inj_rb;
    constexpr int kSub = F::QK / 32;
    const int units = nH / 32, u_end = min(units, (split + 1) * kSplitUnits);
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
    for (int u = split * kSplitUnits + lane; u < u_end; u += 32) {
        const uint8_t* blk = wr + (size_t)(u / kSub) * F::BYTES;
        if constexpr (Q8) {
            const int nd = nH / F::ABLK;
            const auto act = [&](int t, int (&a)[8]) -> float {
                const int4* q4 = (const int4*)(xq + (size_t)t * nH + 32 * u);
                const int4 lo = q4[0], hi = q4[1];
                a[0] = lo.x; a[1] = lo.y; a[2] = lo.z; a[3] = lo.w;
                a[4] = hi.x; a[5] = hi.y; a[6] = hi.z; a[7] = hi.w;
                return xd[(size_t)t * nd + (32 * u) / F::ABLK];
            };
            QDot<F>::template dot<NT>(blk, u % kSub, QDot<F>::global_grid(), act, T, acc);
        } else {
            float wv[32];
            F::deq32(blk, u % kSub, wv);
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                if (t >= T) break;
                const float* xr = xn + (size_t)t * nH + 32 * u;
                float s = 0.0f;
#pragma unroll
                for (int e = 0; e < 32; ++e) s = fmaf(wv[e], xr[e], s);
                acc[t] += s;
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        const float v = warp_sum(acc[t]);
        if (lane == 0 && t < T) part[((size_t)split * T + t) * R + row] = v;
    }
}

// ---- kernel 3: grid H / kCols; each group of kGroup lanes takes one column j. Shared: a [T, r] = silu(Σ partials
// / n), its Q8 form (Q8) when the up weight is a block format; m = σ(up row s·H + j · a), u = (1/n) Σ_s m · xn.
// PLAIN: the up weight is F32 / F16 / BF16 (element loop, any r). Block 0 writes inj = 2σ(Σ partials / n).
template <class F, bool Q8, bool PLAIN, int NT>
__global__ void __launch_bounds__(kThreads)
hr_mix_kernel(const float* __restrict__ part, int splits, int R, int r, int n, int H, int T,
              const uint8_t* __restrict__ up, size_t up_rb, const float* __restrict__ xn, float* __restrict__ u,
              float* __restrict__ inj) {
    extern __shared__ int4 smem4[];
    float* a = (float*)smem4;                                  // [T, r]
    int8_t* aq = (int8_t*)(a + (size_t)T * r);                 // [T, r] (16-byte aligned: r % 32 == 0 when Q8)
    float* ad = (float*)(aq + (size_t)T * r);                  // [T, r / ABLK]
    mix_prologue<F, Q8>(part, splits, R, r, n, T, blockIdx.x == 0 ? inj : nullptr, a, aq, ad);
    const int lane = threadIdx.x & 31;
    const int g = lane % kGroup;
    const int j = blockIdx.x * kCols + threadIdx.x / kGroup;
    const int jj = min(j, H - 1);   // every lane runs the loops (group shuffles); only j < H writes
    const int nH = n * H;
    float acc_u[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc_u[t] = 0.0f;
    for (int s = 0; s < n; ++s) {
        const int row = s * H + jj;
        const uint8_t* wr = up + (size_t)row * up_rb;
        float acc[NT];
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
        up_row_dot<F, Q8, PLAIN, NT, kGroup>(wr, r, g, T, a, aq, ad, acc);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const float dot = group_sum<kGroup>(acc[t]);
            if (t < T) {
                const float m = 1.0f / (1.0f + expf(-dot));
                acc_u[t] += m * xn[(size_t)t * nH + row];
            }
        }
    }
    if (g == 0 && j < H)
#pragma unroll
        for (int t = 0; t < NT; ++t)
            if (t < T) u[(size_t)t * H + j] = acc_u[t] / (float)n;
}

struct Layout {
    size_t xn = 0, xq = 0, xd = 0, part = 0, total = 0;
    int splits = 0, R = 0;
};

inline Layout layout(const HyperReadArgs& a, int T, bool with_inj) {
    Layout l;
    const size_t nH = (size_t)a.n * a.H;
    l.R = a.r + (with_inj ? a.n : 0);
    l.splits = (int)((nH / 32 + kSplitUnits - 1) / kSplitUnits);
    l.xq = align256(T * nH * sizeof(float));
    l.xd = l.xq + align256(T * nH);
    l.part = l.xd + align256(T * (nH / 32) * sizeof(float));
    l.total = l.part + align256((size_t)l.splits * T * l.R * sizeof(float));
    return l;
}

// The old launcher (the caller has checked hyper_read_supported).
inline void run(cudaStream_t s, const HyperReadArgs& a, const float* X, int T, void* scratch, float* u, float* inj) {
    const bool with_inj = inj != nullptr;
    STRATA_CHECK(!with_inj || a.inject, "cuda hyper_read: inj requested without an inject weight");
    const Layout l = layout(a, T, with_inj);
    uint8_t* base = static_cast<uint8_t*>(scratch);
    float* xn = (float*)base;
    int8_t* xq = (int8_t*)(base + l.xq);
    float* xd = (float*)(base + l.xd);
    float* part = (float*)(base + l.part);
    const int nH = a.n * a.H;
    const bool one = T == 1;

    const int blk_down = hr_act_block(a.down_type, a.f32_act);
    const dim3 norm_grid((unsigned)((nH + kNormCols - 1) / kNormCols), (unsigned)T);
    if (blk_down == 256)
        hr_norm_kernel<256><<<norm_grid, kThreads, 0, s>>>(X, a.norm, a.norm_len, a.n, a.H, a.eps, xn, xq, xd);
    else if (blk_down == 32)
        hr_norm_kernel<32><<<norm_grid, kThreads, 0, s>>>(X, a.norm, a.norm_len, a.n, a.H, a.eps, xn, xq, xd);
    else
        hr_norm_kernel<0><<<norm_grid, kThreads, 0, s>>>(X, a.norm, a.norm_len, a.n, a.H, a.eps, xn, xq, xd);
    CUDA_CHECK_LAUNCH();

    const unsigned down_blocks = (unsigned)((l.R * l.splits + kThreads / 32 - 1) / (kThreads / 32));
    with_hr_format(a.down_type, [&](auto f) {
        using F = decltype(f);
        auto launch = [&](auto kernel) {
            kernel<<<down_blocks, kThreads, 0, s>>>(a.down, a.down_rb, a.inject, a.inject_rb, a.r, l.R, nH, T,
                                                    l.splits, xn, xq, xd, part);
        };
        if constexpr (F::ABLK > 0) {
            if (blk_down) {
                if (one) launch(hr_down_kernel<F, true, 1>);
                else launch(hr_down_kernel<F, true, kMaxTokens>);
                return;
            }
        }
        if (one) launch(hr_down_kernel<F, false, 1>);
        else launch(hr_down_kernel<F, false, kMaxTokens>);
    });
    CUDA_CHECK_LAUNCH();

    const int blk_up = is_plain(a.up_type) ? 0 : hr_act_block(a.up_type, a.f32_act);
    const size_t smem = (size_t)T * a.r * sizeof(float) + align256((size_t)T * a.r) +
                        (blk_up ? (size_t)T * (a.r / blk_up) * sizeof(float) : 0);
    const unsigned mix_blocks = (unsigned)((a.H + kCols - 1) / kCols);
    with_hr_format(a.up_type, [&](auto f) {
        using F = decltype(f);
        auto launch = [&](auto kernel) {
            kernel<<<mix_blocks, kThreads, smem, s>>>(part, l.splits, l.R, a.r, a.n, a.H, T, a.up, a.up_rb, xn, u,
                                                      with_inj ? inj : nullptr);
        };
        if constexpr (F::ABLK == 0) {
            if (one) launch(hr_mix_kernel<F, false, true, 1>);
            else launch(hr_mix_kernel<F, false, true, kMaxTokens>);
        } else {
            if (blk_up) {
                if (one) launch(hr_mix_kernel<F, true, false, 1>);
                else launch(hr_mix_kernel<F, true, false, kMaxTokens>);
            } else {
                if (one) launch(hr_mix_kernel<F, false, false, 1>);
                else launch(hr_mix_kernel<F, false, false, kMaxTokens>);
            }
        }
    });
    CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda::hr_v1
