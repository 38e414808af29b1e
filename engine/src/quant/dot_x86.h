// x86 SIMD dot kernels (single activation), compiled once per ISA: included by dot_avx2.cpp, dot_avx512.cpp and dot_vnni_avx512.cpp,
// each with its own target flags (__AVX512BW__ / STRATA_VNNI pick the variants). Everything here has internal
// linkage so the copies never mix. Integer sums are exact, so each kernel matches the scalar one up to float rounding.
#pragma once
#ifdef __AVX512F__
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own undefined vectors.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#include <type_traits>
#include "quant/quant_internal.h"
#include "quant/iq_tables.h"

namespace strata::qk {
namespace {

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline int hsum_i32x8(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

// acc + sum of groups of 4 products u8 * s8 (u <= 127 so the i16 pairs of maddubs cannot saturate).
inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s) {
#ifdef STRATA_VNNI
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

// sum of groups of s8 * s8 products (|x| <= 127 both sides)
inline __m256i sdot(__m256i acc, __m256i x, __m256i y) {
    return dpbusd(acc, _mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

// sum of (u - off) * s over groups, u and off unsigned bytes
inline __m256i dot_offset(__m256i u, __m256i off, __m256i s) {
#ifdef STRATA_VNNI
    __m256i z = _mm256_setzero_si256();
    return _mm256_sub_epi32(_mm256_dpbusd_epi32(z, u, s), _mm256_dpbusd_epi32(z, off, s));
#else
    __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(u, s), _mm256_maddubs_epi16(off, s));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
#endif
}

// y with the sign of byte j flipped where bit j of bits is set (y never holds -128).
inline __m256i apply_signs(__m256i y, uint32_t bits) {
#ifdef __AVX512BW__
    return _mm256_mask_sub_epi8(y, (__mmask32)bits, _mm256_setzero_si256(), y);
#else
    const __m256i rep = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i m = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), rep), bit), bit);
    return _mm256_sub_epi8(_mm256_xor_si256(y, m), m);
#endif
}

// ---- plain float weights x f32 activations ----

#ifdef __AVX512F__
template <bool Bf16>
inline __m512 load16_half(const uint16_t* p, __mmask16 m) {
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    if constexpr (Bf16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    else return _mm512_cvtph_ps(h);
}

template <bool Bf16>
inline float dot_half(int64_t n, const void* w, const void* act) {
    const uint16_t* x = (const uint16_t*)w;
    const float* a = (const float*)act;
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps(), s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
    const __mmask16 all = 0xffff;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_fmadd_ps(load16_half<Bf16>(x + i, all), _mm512_loadu_ps(a + i), s0);
        s1 = _mm512_fmadd_ps(load16_half<Bf16>(x + i + 16, all), _mm512_loadu_ps(a + i + 16), s1);
        s2 = _mm512_fmadd_ps(load16_half<Bf16>(x + i + 32, all), _mm512_loadu_ps(a + i + 32), s2);
        s3 = _mm512_fmadd_ps(load16_half<Bf16>(x + i + 48, all), _mm512_loadu_ps(a + i + 48), s3);
    }
    for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(load16_half<Bf16>(x + i, all), _mm512_loadu_ps(a + i), s0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        s1 = _mm512_fmadd_ps(load16_half<Bf16>(x + i, m), _mm512_maskz_loadu_ps(m, a + i), s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}
#else
template <bool Bf16>
inline __m256 load8_half(const uint16_t* p) {
    __m128i h = _mm_loadu_si128((const __m128i*)p);
    if constexpr (Bf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    else return _mm256_cvtph_ps(h);
}

template <bool Bf16>
inline float dot_half(int64_t n, const void* w, const void* act) {
    const uint16_t* x = (const uint16_t*)w;
    const float* a = (const float*)act;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(load8_half<Bf16>(x + i), _mm256_loadu_ps(a + i), s0);
        s1 = _mm256_fmadd_ps(load8_half<Bf16>(x + i + 8), _mm256_loadu_ps(a + i + 8), s1);
        s2 = _mm256_fmadd_ps(load8_half<Bf16>(x + i + 16), _mm256_loadu_ps(a + i + 16), s2);
        s3 = _mm256_fmadd_ps(load8_half<Bf16>(x + i + 24), _mm256_loadu_ps(a + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(load8_half<Bf16>(x + i), _mm256_loadu_ps(a + i), s0);
    float sum = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; ++i) sum += (Bf16 ? bf16_to_float(x[i]) : h2f(x[i])) * a[i];
    return sum;
}
#endif

float dot_f16(int64_t n, const void* w, const void* act) { return dot_half<false>(n, w, act); }
float dot_bf16(int64_t n, const void* w, const void* act) { return dot_half<true>(n, w, act); }

// ---- 32-blocks x Q8_0 activations ----

// 16 bytes of nibbles -> 32 bytes: low nibbles (elements 0..15) then high nibbles (16..31)
inline __m256i nibbles32(const uint8_t* qs) {
    __m128i q = _mm_loadu_si128((const __m128i*)qs);
    __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

float dot_q4_0(int64_t n, const void* w, const void* act) {
    const BlockQ4_0* x = (const BlockQ4_0*)w;
    const BlockQ8_0* a = (const BlockQ8_0*)act;
    const __m256i eight = _mm256_set1_epi8(8);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    const int64_t nb = n / 32;
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m256i p0 = dot_offset(nibbles32(x[i].qs), eight, _mm256_loadu_si256((const __m256i*)a[i].qs));
        __m256i p1 = dot_offset(nibbles32(x[i + 1].qs), eight, _mm256_loadu_si256((const __m256i*)a[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * h2f(a[i].d)), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i + 1].d) * h2f(a[i + 1].d)), _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; i < nb; ++i) {
        __m256i p = dot_offset(nibbles32(x[i].qs), eight, _mm256_loadu_si256((const __m256i*)a[i].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * h2f(a[i].d)), _mm256_cvtepi32_ps(p), acc0);
    }
    return hsum8(_mm256_add_ps(acc0, acc1));
}

// 32 bits -> 32 bytes, 0xFF where the bit is set
inline __m256i bits_to_bytes(uint32_t bits) {
    const __m256i rep = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), rep), bit), bit);
}

float dot_q5_0(int64_t n, const void* w, const void* act) {
    const BlockQ5_0* x = (const BlockQ5_0*)w;
    const BlockQ8_0* a = (const BlockQ8_0*)act;
    const __m256i sixteen = _mm256_set1_epi8(16);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; ++i) {
        __m256i q = _mm256_or_si256(nibbles32(x[i].qs), _mm256_and_si256(bits_to_bytes(load_u32(x[i].qh)), sixteen));
        __m256i p = dot_offset(q, sixteen, _mm256_loadu_si256((const __m256i*)a[i].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * h2f(a[i].d)), _mm256_cvtepi32_ps(p), acc);
    }
    return hsum8(acc);
}

// Q4_1 / Q5_1: codes q in 0..31 (u8) against the activations: acc_q += d*da * sum(q*qa), acc_m += m*da * sum(qa)
inline void dot_min_block(__m256i q, uint16_t d, uint16_t m, const BlockQ8_0& a, __m256& acc_q, __m256& acc_m) {
    const __m256i z = _mm256_setzero_si256();
    __m256i y = _mm256_loadu_si256((const __m256i*)a.qs);
    __m256i p = dpbusd(z, q, y);
    __m256i sa = dpbusd(z, _mm256_set1_epi8(1), y);
    float da = h2f(a.d);
    acc_q = _mm256_fmadd_ps(_mm256_set1_ps(h2f(d) * da), _mm256_cvtepi32_ps(p), acc_q);
    acc_m = _mm256_fmadd_ps(_mm256_set1_ps(h2f(m) * da), _mm256_cvtepi32_ps(sa), acc_m);
}

float dot_q4_1(int64_t n, const void* w, const void* act) {
    const BlockQ4_1* x = (const BlockQ4_1*)w;
    const BlockQ8_0* a = (const BlockQ8_0*)act;
    __m256 acc_q = _mm256_setzero_ps(), acc_m = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; ++i) dot_min_block(nibbles32(x[i].qs), x[i].d, x[i].m, a[i], acc_q, acc_m);
    return hsum8(_mm256_add_ps(acc_q, acc_m));
}

float dot_q5_1(int64_t n, const void* w, const void* act) {
    const BlockQ5_1* x = (const BlockQ5_1*)w;
    const BlockQ8_0* a = (const BlockQ8_0*)act;
    const __m256i sixteen = _mm256_set1_epi8(16);
    __m256 acc_q = _mm256_setzero_ps(), acc_m = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; ++i) {
        __m256i q = _mm256_or_si256(nibbles32(x[i].qs), _mm256_and_si256(bits_to_bytes(load_u32(x[i].qh)), sixteen));
        dot_min_block(q, x[i].d, x[i].m, a[i], acc_q, acc_m);
    }
    return hsum8(_mm256_add_ps(acc_q, acc_m));
}

inline __m256i iq4nl_table() {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)iq::kvalues_iq4nl));
}

// ---- 256-blocks x Q8_K activations ----

inline __m256i load256(const void* p) { return _mm256_loadu_si256((const __m256i*)p); }

// Q4_K / Q5_K: the 8 scales (bytes 0..7) and 8 mins (bytes 8..15) from the 12 packed bytes.
inline void k4_unpack_scales(const uint8_t* s, uint32_t out[4]) {
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    uint32_t u[3];
    std::memcpy(u, s, 12);
    out[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
    out[2] = u[1] & k1;
    out[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
    out[0] = u[0] & k1;
}

float dot_iq4_xs(int64_t n, const void* w, const void* act) {
    const BlockIQ4_XS* x = (const BlockIQ4_XS*)w;
    const BlockQ8_K* a = (const BlockQ8_K*)act;
    const __m256i table = iq4nl_table();
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ++ib) {
            __m256i q = _mm256_shuffle_epi8(table, nibbles32(x[i].qs + 16 * ib));
            __m256i y = load256(a[i].qs + 32 * ib);
            __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(y, q));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, _mm256_set1_epi16((short)iq4xs_scale(x[i], ib))));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(a[i].d * h2f(x[i].d)), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum8(acc);
}

// i16 x16 scale vector: lanes 0..7 = lo, lanes 8..15 = hi (the two 16-weight halves of a 32-group)
inline __m256i scales_2x16(int lo, int hi) {
    return _mm256_set_m128i(_mm_set1_epi16((short)hi), _mm_set1_epi16((short)lo));
}

float dot_iq2_xxs(int64_t n, const void* w, const void* act) {
    const BlockIQ2_XXS* x = (const BlockIQ2_XXS*)w;
    const BlockQ8_K* a = (const BlockQ8_K*)act;
    const uint64_t* grid = iq::iq2xxs_grid;
    const uint8_t* ks = iq::ksigns_iq2xs;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ++ib) {
            uint32_t idx = load_u32(x[i].qs + 4 * ib), aux = load_u32(x[i].qs + 4 * ib + 2);
            __m256i g = _mm256_set_epi64x((long long)grid[idx >> 24], (long long)grid[(idx >> 16) & 255],
                                          (long long)grid[(idx >> 8) & 255], (long long)grid[idx & 255]);
            uint32_t signs = (uint32_t)ks[aux & 127] | (uint32_t)ks[(aux >> 7) & 127] << 8 |
                             (uint32_t)ks[(aux >> 14) & 127] << 16 | (uint32_t)ks[(aux >> 21) & 127] << 24;
            __m256i yv = apply_signs(load256(a[i].qs + 32 * ib), signs);
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(g, yv),
                                                            _mm256_set1_epi16((short)(2 * (aux >> 28) + 1))));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(a[i].d * h2f(x[i].d)), _mm256_cvtepi32_ps(sumi), acc);
    }
    return 0.125f * hsum8(acc);
}

float dot_iq2_s(int64_t n, const void* w, const void* act) {
    const BlockIQ2_S* x = (const BlockIQ2_S*)w;
    const BlockQ8_K* a = (const BlockQ8_K*)act;
    const uint64_t* grid = iq::iq2s_grid;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ++ib) {
            const uint8_t* q = x[i].qs + 4 * ib;
            uint32_t qh = x[i].qh[ib];
            __m256i g = _mm256_set_epi64x((long long)grid[q[3] | ((qh << 2) & 0x300)], (long long)grid[q[2] | ((qh << 4) & 0x300)],
                                          (long long)grid[q[1] | ((qh << 6) & 0x300)], (long long)grid[q[0] | ((qh << 8) & 0x300)]);
            __m256i yv = apply_signs(load256(a[i].qs + 32 * ib), load_u32(x[i].signs + 4 * ib));
            uint8_t s = x[i].scales[ib];
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(g, yv),
                                                            scales_2x16(2 * (s & 15) + 1, 2 * (s >> 4) + 1)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(a[i].d * h2f(x[i].d)), _mm256_cvtepi32_ps(sumi), acc);
    }
    return 0.125f * hsum8(acc);
}

float dot_iq3_s(int64_t n, const void* w, const void* act) {
    const BlockIQ3_S* x = (const BlockIQ3_S*)w;
    const BlockQ8_K* a = (const BlockQ8_K*)act;
    const uint32_t* grid = iq::iq3s_grid;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        __m256i sumi = _mm256_setzero_si256();
        const uint8_t* q = x[i].qs;
        for (int ib = 0; ib < 8; ++ib, q += 8) {
            uint32_t qh = x[i].qh[ib];
            __m256i g = _mm256_setr_epi32((int)grid[q[0] | ((qh << 8) & 256)], (int)grid[q[1] | ((qh << 7) & 256)],
                                          (int)grid[q[2] | ((qh << 6) & 256)], (int)grid[q[3] | ((qh << 5) & 256)],
                                          (int)grid[q[4] | ((qh << 4) & 256)], (int)grid[q[5] | ((qh << 3) & 256)],
                                          (int)grid[q[6] | ((qh << 2) & 256)], (int)grid[q[7] | ((qh << 1) & 256)]);
            __m256i yv = apply_signs(load256(a[i].qs + 32 * ib), load_u32(x[i].signs + 4 * ib));
            int s = (x[i].scales[ib / 2] >> (4 * (ib % 2))) & 15;
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(g, yv), _mm256_set1_epi16((short)(2 * s + 1))));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(a[i].d * h2f(x[i].d)), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum8(acc);
}

void fill_x86_dots(DotTable& t) {
    auto set = [&](GgmlType ty, DotFn f) { t.dot[(int)ty] = f; };
    // F32, Q8_0, IQ4_NL, Q2_0, the K-quants, IQ2_XS and IQ3_XXS: multi-activation kernels, gemv_x86*.h
    set(GgmlType::F16, dot_f16);         set(GgmlType::BF16, dot_bf16);
    set(GgmlType::Q4_0, dot_q4_0);       set(GgmlType::Q5_0, dot_q5_0);     set(GgmlType::Q4_1, dot_q4_1);
    set(GgmlType::Q5_1, dot_q5_1);       set(GgmlType::IQ4_XS, dot_iq4_xs);
    set(GgmlType::IQ2_XXS, dot_iq2_xxs); set(GgmlType::IQ2_S, dot_iq2_s);   set(GgmlType::IQ3_S, dot_iq3_s);
}

}  // namespace
}  // namespace strata::qk
