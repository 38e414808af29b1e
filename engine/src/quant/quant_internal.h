// Shared by the quant/ sources only: the block layouts (as in ggml), exact fp16/bf16 conversion,
// scale unpacking helpers and the kernel tables each ISA fills in.
#pragma once
#include <cstdint>
#include <cstring>
#include "quant/quant.h"

namespace strata::qk {

constexpr int QK_K = 256;

struct BlockQ8_0 { uint16_t d; int8_t qs[32]; };
struct BlockQ4_0 { uint16_t d; uint8_t qs[16]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };
struct BlockQ4_1 { uint16_t d; uint16_t m; uint8_t qs[16]; };              // weight d*q + m
struct BlockQ5_1 { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[16]; };
struct BlockIQ4_NL { uint16_t d; uint8_t qs[16]; };
struct BlockQ2_0 { uint16_t d; uint8_t qs[16]; };   // 64 weights, code (qs[j/4] >> 2*(j%4)) & 3, value (code-1)*d
struct BlockQ2_K { uint8_t scales[16]; uint8_t qs[64]; uint16_t d; uint16_t dmin; };
struct BlockQ3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; };
struct BlockQ4_K { uint16_t d; uint16_t dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct BlockQ5_K { uint16_t d; uint16_t dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct BlockQ6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
struct BlockQ8_K { float d; int8_t qs[256]; int16_t bsums[16]; };
struct BlockIQ2_XXS { uint16_t d; uint16_t qs[32]; };
struct BlockIQ2_XS { uint16_t d; uint16_t qs[32]; uint8_t scales[8]; };
struct BlockIQ2_S { uint16_t d; uint8_t qs[32]; uint8_t signs[32]; uint8_t qh[8]; uint8_t scales[8]; };
struct BlockIQ3_XXS { uint16_t d; uint8_t qs[64]; uint8_t scales_signs[32]; };
struct BlockIQ3_S { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t signs[32]; uint8_t scales[4]; };
struct BlockIQ4_XS { uint16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; };

static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ2_0) == 18 && sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIQ2_XXS) == 66 && sizeof(BlockIQ2_XS) == 74 && sizeof(BlockIQ2_S) == 82);
static_assert(sizeof(BlockIQ3_XXS) == 98 && sizeof(BlockIQ3_S) == 110 && sizeof(BlockIQ4_XS) == 136);

// Exact IEEE half -> float (subnormals, inf and NaN included), no F16C needed.
inline float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {  // subnormal: normalise
        int e = -1;
        do { man <<= 1; ++e; } while (!(man & 0x400));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

inline float bf16_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

inline uint32_t load_u32(const void* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }

// Q4_K / Q5_K: 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
inline void k4_scale_min(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Q3_K: the 16 signed 6-bit scales (already minus 32).
inline void q3k_scales(const uint8_t* s, int8_t out[16]) {
    for (int i = 0; i < 16; ++i) {
        int lo = i < 8 ? (s[i] & 0xF) : (s[i - 8] >> 4);
        int hi = (s[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
        out[i] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

// IQ4_XS: signed 6-bit scale (minus 32) of sub-block ib (0..7).
inline int iq4xs_scale(const BlockIQ4_XS& b, int ib) {
    int lo = (b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF;
    int hi = (b.scales_h >> (2 * ib)) & 3;
    return (lo | (hi << 4)) - 32;
}

// Q2_0 activations: after the n/32 Q8_0 blocks, one group per 64 activations (blocks 2g, 2g+1), laid out for
// the SIMD kernels: perm[16*s + k] = a[4k + s] (the order in which shifts of a broadcast Q2_0 block yield codes),
// negsum[L] = -(sum of perm bytes 4L..4L+3 and 32+4L..32+4L+3) (folds the code-1 offset into the integer dot),
// dscale[L] = the fp16 scale of the Q8_0 block those bytes come from (block 2g when L % 4 < 2, else 2g+1); for
// L >= 4 (where the kernel's codes are 4 times the code) negsum is 4 times that sum and dscale a quarter of the scale.
struct Q2_0ActGroup { int8_t perm[64]; int32_t negsum[8]; float dscale[8]; };
static_assert(sizeof(Q2_0ActGroup) == 128);
inline const Q2_0ActGroup* q2_0_act_groups(const void* act, int64_t n) {
    return (const Q2_0ActGroup*)((const uint8_t*)act + (size_t)(n / 32) * sizeof(BlockQ8_0));
}

// One dot kernel: a weight row of n elements against an activation row in the type's ActFormat.
using DotFn = float (*)(int64_t n, const void* w, const void* act);
// out[t] = dot(weight row, activation row t) for t < na <= kMaxMultiAct; activation t is at act + t * act_stride.
// Each out[t] equals the same ISA's DotFn on that activation bit for bit.
using MultiFn = void (*)(int64_t n, const void* w, const uint8_t* act, size_t act_stride, int na, float* out);
constexpr int kMaxMultiAct = 8;

constexpr int kMaxType = 43;  // ggml type ids are below this
// out[0], out[1] = dot(weight rows w and w + row_bytes, one activation row), each equal to the DotFn bit for bit.
using Rows2Fn = void (*)(int64_t n, const void* w, size_t row_bytes, const void* act, float* out);
struct DotTable { DotFn dot[kMaxType] = {}; MultiFn multi[kMaxType] = {}; Rows2Fn rows2[kMaxType] = {}; };

// Every ISA file fills a table; entries it leaves empty fall back to the scalar kernel.
void fill_dots_scalar(DotTable& t);
void fill_dots_avx2(DotTable& t);
void fill_dots_avx512(DotTable& t);
void fill_dots_avx512_vnni(DotTable& t);  // call only when the CPU has AVX512-VNNI

}  // namespace strata::qk
