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

// Q8 activation blocks (quantize_act's arithmetic): v holds lane's values BLK/32 … of one block of BLK.
template <int BLK>
__device__ __forceinline__ float quantize_block(const float (&v)[BLK / 32], int8_t* q, int lane) {
    constexpr int V = BLK / 32;
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < V; ++k) amax = fmaxf(amax, fabsf(v[k]));
    amax = warp_max(amax);
    const float dd = amax / 127.0f;
    const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
#pragma unroll
    for (int k = 0; k < V; ++k) {
        float r = rintf(v[k] * id);
        if (BLK == 256) r = fminf(127.0f, fmaxf(-127.0f, r));
        q[lane + 32 * k] = (int8_t)(int)r;
    }
    return BLK == 32 ? __half2float(__float2half_rn(dd)) : dd;
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
