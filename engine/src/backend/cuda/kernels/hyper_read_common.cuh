// Helpers of the fused hyper_read kernels (hyper_read.cu and the older three-kernel path in hyper_read_v1.cuh):
// plain weight formats as 32-weight blocks, Q8 activation blocks as quantize_act makes them, the format switch.
// Included only by hyper_read.cu (one translation unit: its own copies of the i-quant tables).
#pragma once
#include <type_traits>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/quant_dots.cuh"
#include "backend/cuda/kernels/quant_formats.cuh"

namespace strata::cuda::hr {

constexpr int kMaxTokens = 8;       // more tokens (prompt chunks): the caller composes the primitive ops
constexpr int kMaxStreams = 8;
constexpr int kMaxRank = 512;       // r: the mix kernels keep a [T, r] in shared memory
constexpr int kThreads = 256;       // every kernel here

// Plain weights seen as 32-weight "blocks" (ABLK 0: f32 activations) for the dots of kernel 2.
struct FmtF32 {
    static constexpr int QK = 32, BYTES = 128, ABLK = 0;
    SD static void deq32(const uint8_t* b, int, float* y) {
#pragma unroll
        for (int e = 0; e < 32; ++e) y[e] = ((const float*)b)[e];
    }
};
struct FmtF16 {
    static constexpr int QK = 32, BYTES = 64, ABLK = 0;
    SD static void deq32(const uint8_t* b, int, float* y) {
#pragma unroll
        for (int e = 0; e < 32; ++e) y[e] = half_to_float(ld16(b + 2 * e));
    }
};
struct FmtBF16 {
    static constexpr int QK = 32, BYTES = 64, ABLK = 0;
    SD static void deq32(const uint8_t* b, int, float* y) {
#pragma unroll
        for (int e = 0; e < 32; ++e) y[e] = bf16_to_float(ld16(b + 2 * e));
    }
};

// Weight i of a plain row (the up product reads plain rows element by element: r need not be a multiple of 32).
template <class F>
__device__ __forceinline__ float plain_at(const uint8_t* row, int i) {
    if constexpr (std::is_same_v<F, FmtF32>) return ((const float*)row)[i];
    else if constexpr (std::is_same_v<F, FmtF16>) return half_to_float(ld16(row + 2 * i));
    else return bf16_to_float(ld16(row + 2 * i));
}

// Sum over groups of G consecutive lanes (G a power of two ≤ 32).
template <int G>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Loads the 128-byte line holding p into L2 ahead of its use (weights read after a prologue that waits on other data).
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// Calls fn(FmtX{}) for the weight formats the fused path reads (those of the GGUF layouts: GGUF.md §4.2, the
// synthetic and tiny models); false otherwise (the caller then composes the primitive ops).
template <class Fn>
bool with_hr_format(GgmlType t, Fn&& fn) {
    switch (t) {
    case GgmlType::F32: fn(FmtF32{}); return true;
    case GgmlType::F16: fn(FmtF16{}); return true;
    case GgmlType::BF16: fn(FmtBF16{}); return true;
    default: {
        bool taken = false;
        with_block_format(t, [&](auto f) {
            using F = decltype(f);
            if constexpr (std::is_same_v<F, FmtQ8_0> || std::is_same_v<F, FmtQ4_0> || std::is_same_v<F, FmtIQ4_NL> ||
                          std::is_same_v<F, FmtQ2_0> || std::is_same_v<F, FmtQ2_K> || std::is_same_v<F, FmtQ3_K> ||
                          std::is_same_v<F, FmtIQ2_XS> || std::is_same_v<F, FmtIQ3_XXS>) {
                fn(f);
                taken = true;
            }
        });
        return taken;
    }
    }
}

// The mix kernels' prologue, every block: a [T, r] = silu(Σ_c part[c, t, k] / n); inj [T, n] = 2σ(Σ_c part[c, t, r + s]
// / n) when inj is given (the caller passes it in block 0 only). The f32 mode keeps a in shared memory; the Q8 mode
// only its quantized form aq / ad: warp b computes activation block b's values and quantizes them in registers (the
// same values and bits as a quantization of a). part [chunks, T, R]. Ends with the block synchronised.
template <class F, bool Q8>
// part is read through L2 only (__ldcg): kernel 1 of this call wrote it, and an L1 line of an earlier call's part
// at the same address must not be read (seen with kernel 2 as a programmatic dependent launch, r74).
__device__ __forceinline__ void mix_prologue(const float* __restrict__ part, int chunks, int R, int r, int n, int T,
                                             float* __restrict__ inj, float* a, int8_t* aq, float* ad) {
    const float inv_n = 1.0f / (float)n;
    auto silu_of_sum = [&](int i) {
        const int t = i / r, k = i % r;
        float v = 0.0f;
        for (int c = 0; c < chunks; ++c) v += __ldcg(part + ((size_t)c * T + t) * R + k);
        v *= inv_n;
        return v / (1.0f + expf(-v));
    };
    if constexpr (Q8) {
        const int lane = threadIdx.x & 31;
        constexpr int B = F::ABLK, V = B / 32;
        for (int b = threadIdx.x >> 5; b < T * r / B; b += blockDim.x >> 5) {
            float v[V];
#pragma unroll
            for (int k = 0; k < V; ++k) v[k] = silu_of_sum(b * B + lane + 32 * k);
            const float d = quantize_act_block<B>(v, lane, aq + b * B);
            if (lane == 0) ad[b] = d;
        }
    } else {
        for (int i = threadIdx.x; i < T * r; i += blockDim.x) a[i] = silu_of_sum(i);
    }
    if (inj)
        for (int i = threadIdx.x; i < T * n; i += blockDim.x) {
            const int t = i / n, k = r + i % n;
            float v = 0.0f;
            for (int c = 0; c < chunks; ++c) v += __ldcg(part + ((size_t)c * T + t) * R + k);
            inj[i] = 1.0f / (1.0f + expf(-(v * inv_n))) * 2.0f;
        }
    __syncthreads();
}

// acc[t] += this lane's share of up row wr · a[t] (length r) for t < T: lane g of a G-lane group takes elements
// (PLAIN) or 32-value chunks g, g + G, …; a in f32, or its Q8 form aq / ad (Q8). The caller sums over the group.
template <class F, bool Q8, bool PLAIN, int NT, int G>
__device__ __forceinline__ void up_row_dot(const uint8_t* wr, int r, int g, int T, const float* a, const int8_t* aq,
                                           const float* ad, float (&acc)[NT]) {
    if constexpr (PLAIN) {
        for (int i = g; i < r; i += G) {
            const float wv = plain_at<F>(wr, i);
#pragma unroll
            for (int t = 0; t < NT; ++t)
                if (t < T) acc[t] = fmaf(wv, a[t * r + i], acc[t]);
        }
    } else {
        constexpr int kSub = F::QK / 32;
        for (int c = g; c < r / 32; c += G) {
            const uint8_t* blk = wr + (size_t)(c / kSub) * F::BYTES;
            if constexpr (Q8) {
                const int nd = r / F::ABLK;
                const auto act = [&](int t, int (&q)[8]) -> float {
                    const int4* q4 = (const int4*)(aq + t * r + 32 * c);
                    const int4 lo = q4[0], hi = q4[1];
                    q[0] = lo.x; q[1] = lo.y; q[2] = lo.z; q[3] = lo.w;
                    q[4] = hi.x; q[5] = hi.y; q[6] = hi.z; q[7] = hi.w;
                    return ad[t * nd + (32 * c) / F::ABLK];
                };
                QDot<F>::template dot<NT>(blk, c % kSub, QDot<F>::global_grid(), act, T, acc);
            } else {
                float wv[32];
                F::deq32(blk, c % kSub, wv);
#pragma unroll
                for (int t = 0; t < NT; ++t) {
                    if (t >= T) break;
                    float sdot = 0.0f;
#pragma unroll
                    for (int e = 0; e < 32; ++e) sdot = fmaf(wv[e], a[t * r + 32 * c + e], sdot);
                    acc[t] += sdot;
                }
            }
        }
    }
}

inline bool is_plain(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

inline int qk_of(GgmlType t) {
    int qk = 0;
    with_hr_format(t, [&](auto f) { qk = decltype(f)::QK; });
    return qk;
}

// The activation block of a weight format in the fused path: 0 = f32 activations.
inline int hr_act_block(GgmlType t, bool f32_act) {
    int blk = 0;
    with_hr_format(t, [&](auto f) { blk = decltype(f)::ABLK; });
    return f32_act ? 0 : blk;
}

__host__ __device__ inline size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

}  // namespace strata::cuda::hr
