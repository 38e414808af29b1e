// Multi-activation x86 kernels for the grid i-quants IQ2_XS and IQ3_XXS: a whole 256-weight super-block is decoded
// per step (grid rows, the 32 sign bytes computed as 7 bits + parity in vector bytes, the sub-block scales), then
// dotted with 1..8 Q8_K activation rows. AVX-512: 64 weights per vector, signs applied with mask registers.
// Grid rows are scalar loads: hardware gathers measured slower on Zen 4 (IQ2_XS 3.8 vs 5.7 GB/s) and are slow on
// Intel with the gather-data-sampling microcode fix.
#pragma once
#include "quant/gemv_x86.h"

namespace strata::qk {
namespace {

// 8 IQ3_XXS grid rows (32 weights) from broadcast loads (load ports only) and blends (any vector ALU) instead of a
// vpinsrd chain (a shuffle uop each). Zen 4: AVX-512 4.4-4.5 vs 4.2-4.3 GB/s, AVX2 unchanged. (For IQ2_XS's 8-byte
// rows the same measured 5-10% slower on Zen 4, so IQ2_XS keeps vmovq + vpinsrq.)
inline __m256i iq3xxs_rows8(const uint8_t* q) {
    const uint32_t* grid = iq::iq3xxs_grid;
    __m256i v = _mm256_castsi128_si256(_mm_cvtsi32_si128((int)grid[q[0]]));
    v = _mm256_blend_epi32(v, _mm256_set1_epi32((int)grid[q[1]]), 0x02);
    v = _mm256_blend_epi32(v, _mm256_set1_epi32((int)grid[q[2]]), 0x04);
    v = _mm256_blend_epi32(v, _mm256_set1_epi32((int)grid[q[3]]), 0x08);
    v = _mm256_blend_epi32(v, _mm256_set1_epi32((int)grid[q[4]]), 0x10);
    v = _mm256_blend_epi32(v, _mm256_set1_epi32((int)grid[q[5]]), 0x20);
    v = _mm256_blend_epi32(v, _mm256_set1_epi32((int)grid[q[6]]), 0x40);
    return _mm256_blend_epi32(v, _mm256_set1_epi32((int)grid[q[7]]), 0x80);
}

// 4 IQ2_XS grid rows (32 weights) for entries e[0..3]: vmovq + vpinsrq (+ vinserti128), the fastest on Zen 4.
// Building with -DSTRATA_IQ2XS_BROADCAST_ROWS=1 takes broadcast loads + blends instead (no shuffle-port uop, which
// may suit Intel's single shuffle port; on Zen 4 it measured 5-10% slower with AVX-512 and 25% with AVX2).
#ifndef STRATA_IQ2XS_BROADCAST_ROWS
#define STRATA_IQ2XS_BROADCAST_ROWS 0
#endif
inline __m256i iq2xs_rows4(const uint16_t* e) {
    const uint64_t* grid = iq::iq2xs_grid;
#if STRATA_IQ2XS_BROADCAST_ROWS
    __m256i v = _mm256_castsi128_si256(_mm_loadl_epi64((const __m128i*)(grid + (e[0] & 511))));
    v = _mm256_blend_epi32(v, _mm256_set1_epi64x((long long)grid[e[1] & 511]), 0x0C);
    v = _mm256_blend_epi32(v, _mm256_set1_epi64x((long long)grid[e[2] & 511]), 0x30);
    return _mm256_blend_epi32(v, _mm256_set1_epi64x((long long)grid[e[3] & 511]), 0xC0);
#else
    return _mm256_set_epi64x((long long)grid[e[3] & 511], (long long)grid[e[2] & 511], (long long)grid[e[1] & 511],
                             (long long)grid[e[0] & 511]);
#endif
}

// The ksigns byte of each 7-bit value in a byte vector: the value plus its parity in bit 7, the parity of the two
// nibbles from a 16-entry table (measured IQ2_XS +6% on Zen 4 over shift/xor parity in 16-bit lanes).
inline __m256i ksigns_bytes(__m256i s7) {
    const __m256i m15 = _mm256_set1_epi8(15);
    const __m256i par = _mm256_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0,
                                         0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0);
    const __m256i lo = _mm256_and_si256(s7, m15), hi = _mm256_and_si256(_mm256_srli_epi16(s7, 4), m15);
    return _mm256_or_si256(s7, _mm256_xor_si256(_mm256_shuffle_epi8(par, lo), _mm256_shuffle_epi8(par, hi)));
}

#ifdef __AVX512BW__
// Per 64 weights: the grid bytes (unsigned), the i16 scale per weight pair, the 64 sign bits.
struct SuperBlock512 {
    __m512i g[4], sc[4];
    uint64_t signs[4];
};

// Dot of a decoded super-block with one Q8_K activation block: sum over 4 x 64 weights.
inline __m512i dot_superblock(const SuperBlock512& b, const int8_t* y) {
    __m512i sumi = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
        __m512i v = _mm512_loadu_si512(y + 64 * j);
        v = _mm512_mask_sub_epi8(v, _cvtu64_mask64(b.signs[j]), _mm512_setzero_si512(), v);
        sumi = dpwssd512(sumi, _mm512_maddubs_epi16(b.g[j], v), b.sc[j]);
    }
    return sumi;
}

inline void decode_iq2_xs(const BlockIQ2_XS& x, SuperBlock512& b) {
    const __m512i q = _mm512_loadu_si512(x.qs);  // 32 x (9-bit grid index | 7-bit sign index << 9)
    __m256i sbytes = ksigns_bytes(_mm512_cvtepi16_epi8(_mm512_srli_epi16(q, 9)));
    _mm256_storeu_si256((__m256i*)b.signs, sbytes);
    // 16 scales, one per 16 weights: byte 2k = low nibble of scales[k], 2k+1 = high nibble; value 2s+1
    __m128i s8 = _mm_loadl_epi64((const __m128i*)x.scales);
    __m128i sc = _mm_unpacklo_epi8(_mm_and_si128(s8, _mm_set1_epi8(15)), _mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(15)));
    sc = _mm_add_epi8(_mm_add_epi8(sc, sc), _mm_set1_epi8(1));
    const __m512i scb = _mm512_broadcast_i32x4(sc);
    for (int j = 0; j < 4; ++j) {
        const uint16_t* e = x.qs + 8 * j;
        b.g[j] = _mm512_inserti64x4(_mm512_castsi256_si512(iq2xs_rows4(e)), iq2xs_rows4(e + 4), 1);
        // 128-bit lane l covers 16 weights: i16 scale = byte 4j + l of sc
        const int k = 4 * j;
        __m512i ctrl = _mm512_setr_epi32(0x80008000 | k * 0x10001, 0x80008000 | k * 0x10001, 0x80008000 | k * 0x10001,
            0x80008000 | k * 0x10001, 0x80008000 | (k + 1) * 0x10001, 0x80008000 | (k + 1) * 0x10001,
            0x80008000 | (k + 1) * 0x10001, 0x80008000 | (k + 1) * 0x10001, 0x80008000 | (k + 2) * 0x10001,
            0x80008000 | (k + 2) * 0x10001, 0x80008000 | (k + 2) * 0x10001, 0x80008000 | (k + 2) * 0x10001,
            0x80008000 | (k + 3) * 0x10001, 0x80008000 | (k + 3) * 0x10001, 0x80008000 | (k + 3) * 0x10001,
            0x80008000 | (k + 3) * 0x10001);
        b.sc[j] = _mm512_shuffle_epi8(scb, ctrl);
    }
}

inline void decode_iq3_xxs(const BlockIQ3_XXS& x, SuperBlock512& b) {
    const __m512i aux = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)x.scales_signs));
    const __m512i shifts = _mm512_setr_epi32(0, 7, 14, 21, 0, 7, 14, 21, 0, 7, 14, 21, 0, 7, 14, 21);
    __m128i half[2];
    for (int h = 0; h < 2; ++h) {  // sub-blocks 4h..4h+3: each u32 gives four 7-bit sign indices
        const int k = 4 * h;
        __m512i r = _mm512_permutexvar_epi32(_mm512_setr_epi32(k, k, k, k, k + 1, k + 1, k + 1, k + 1, k + 2, k + 2,
                                                               k + 2, k + 2, k + 3, k + 3, k + 3, k + 3), aux);
        __m512i s7 = _mm512_and_si512(_mm512_srlv_epi32(r, shifts), _mm512_set1_epi32(127));
        half[h] = _mm512_cvtepi32_epi8(s7);
    }
    _mm256_storeu_si256((__m256i*)b.signs, ksigns_bytes(_mm256_set_m128i(half[1], half[0])));
    // scale 2*(aux >> 28) + 1 per 32 weights, as i16 words 2*ib of scw
    const __m512i scw = _mm512_add_epi32(_mm512_slli_epi32(_mm512_srli_epi32(aux, 28), 1), _mm512_set1_epi32(1));
    for (int j = 0; j < 4; ++j) {
        const uint8_t* q = x.qs + 16 * j;
        b.g[j] = _mm512_inserti64x4(_mm512_castsi256_si512(iq3xxs_rows8(q)), iq3xxs_rows8(q + 8), 1);
        __m512i sel = _mm512_inserti64x4(_mm512_set1_epi16((short)(4 * j)), _mm256_set1_epi16((short)(4 * j + 2)), 1);
        b.sc[j] = _mm512_permutexvar_epi16(sel, scw);
    }
}

template <int NA, bool Iq3>
void iq_grid_k(int64_t n, const void* w, const uint8_t* act, size_t st, float* out) {
    const BlockQ8_K* a[NA];
    for (int t = 0; t < NA; ++t) a[t] = (const BlockQ8_K*)act_row(act, st, t);
    __m512 acc[NA];
    for (int t = 0; t < NA; ++t) acc[t] = _mm512_setzero_ps();
    SuperBlock512 b;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        float d;
        if constexpr (Iq3) {
            decode_iq3_xxs(((const BlockIQ3_XXS*)w)[i], b);
            d = h2f(((const BlockIQ3_XXS*)w)[i].d);
        } else {
            decode_iq2_xs(((const BlockIQ2_XS*)w)[i], b);
            d = h2f(((const BlockIQ2_XS*)w)[i].d);
        }
        for (int t = 0; t < NA; ++t)
            acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(d * a[t][i].d), _mm512_cvtepi32_ps(dot_superblock(b, a[t][i].qs)),
                                     acc[t]);
    }
    const float k = Iq3 ? 0.25f : 0.125f;
    for (int t = 0; t < NA; ++t) out[t] = k * _mm512_reduce_add_ps(acc[t]);
}
#else
// AVX2: per 32 weights the grid bytes, the i16 scales of its two 16-weight halves and a 0xFF mask of negated
// weights, decoded group by group and dotted at once (holding a whole decoded super-block measured slower).
struct Group256 {
    __m256i g, sc, neg;
};

// Per super-block: the 32 sign bytes and the 16 scale bytes (2s+1), then group k on request.
struct DecoderIQ2_XS {
    const BlockIQ2_XS& x;
    alignas(32) uint32_t signs[8];
    __m256i scb;
    explicit DecoderIQ2_XS(const BlockIQ2_XS& b) : x(b) {
        __m256i s0 = _mm256_srli_epi16(load256(x.qs), 9), s1 = _mm256_srli_epi16(load256(x.qs + 16), 9);
        __m256i s7 = _mm256_permute4x64_epi64(_mm256_packus_epi16(s0, s1), 0xD8);
        _mm256_store_si256((__m256i*)signs, ksigns_bytes(s7));
        __m128i s8 = _mm_loadl_epi64((const __m128i*)x.scales);
        __m128i sc = _mm_unpacklo_epi8(_mm_and_si128(s8, _mm_set1_epi8(15)),
                                       _mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(15)));
        scb = _mm256_broadcastsi128_si256(_mm_add_epi8(_mm_add_epi8(sc, sc), _mm_set1_epi8(1)));
    }
    Group256 operator()(int k) const {
        const uint16_t* e = x.qs + 4 * k;
        const int lo = 0x80008000 | (2 * k) * 0x10001, hi = 0x80008000 | (2 * k + 1) * 0x10001;
        return {iq2xs_rows4(e),
                _mm256_shuffle_epi8(scb, _mm256_setr_epi32(lo, lo, lo, lo, hi, hi, hi, hi)), bits_to_bytes(signs[k])};
    }
};

struct DecoderIQ3_XXS {
    const BlockIQ3_XXS& x;
    explicit DecoderIQ3_XXS(const BlockIQ3_XXS& b) : x(b) {}
    Group256 operator()(int k) const {
        const uint8_t* ks = iq::ksigns_iq2xs;
        const uint8_t* q = x.qs + 8 * k;
        uint32_t aux = load_u32(x.scales_signs + 4 * k);
        return {iq3xxs_rows8(q),
                _mm256_set1_epi16((short)(2 * (aux >> 28) + 1)),
                bits_to_bytes((uint32_t)ks[aux & 127] | (uint32_t)ks[(aux >> 7) & 127] << 8 |
                              (uint32_t)ks[(aux >> 14) & 127] << 16 | (uint32_t)ks[(aux >> 21) & 127] << 24)};
    }
};

template <int NA, bool Iq3>
void iq_grid_k(int64_t n, const void* w, const uint8_t* act, size_t st, float* out) {
    const BlockQ8_K* a[NA];
    for (int t = 0; t < NA; ++t) a[t] = (const BlockQ8_K*)act_row(act, st, t);
    __m256 acc[NA];
    for (int t = 0; t < NA; ++t) acc[t] = _mm256_setzero_ps();
    using Block = std::conditional_t<Iq3, BlockIQ3_XXS, BlockIQ2_XS>;
    using Decoder = std::conditional_t<Iq3, DecoderIQ3_XXS, DecoderIQ2_XS>;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const Block& x = ((const Block*)w)[i];
        const Decoder dec(x);
        __m256i sumi[NA];
        for (int t = 0; t < NA; ++t) sumi[t] = _mm256_setzero_si256();
        for (int k = 0; k < 8; ++k) {
            const Group256 gr = dec(k);
            for (int t = 0; t < NA; ++t) {
                __m256i v = load256(a[t][i].qs + 32 * k);
                v = _mm256_sub_epi8(_mm256_xor_si256(v, gr.neg), gr.neg);
                sumi[t] = dpwssd(sumi[t], _mm256_maddubs_epi16(gr.g, v), gr.sc);
            }
        }
        const float d = h2f(x.d);
        for (int t = 0; t < NA; ++t)
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * a[t][i].d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
    }
    const float k = Iq3 ? 0.25f : 0.125f;
    for (int t = 0; t < NA; ++t) out[t] = k * hsum8(acc[t]);
}
#endif

template <int NA>
void iq2_xs_k(int64_t n, const void* w, const uint8_t* act, size_t st, float* out) { iq_grid_k<NA, false>(n, w, act, st, out); }
STRATA_MULTI_KERNEL(iq2_xs_k)

template <int NA>
void iq3_xxs_k(int64_t n, const void* w, const uint8_t* act, size_t st, float* out) { iq_grid_k<NA, true>(n, w, act, st, out); }
STRATA_MULTI_KERNEL(iq3_xxs_k)

void fill_x86_multi(DotTable& t) {
    auto set = [&](GgmlType ty, DotFn f, MultiFn m) { t.dot[(int)ty] = f; t.multi[(int)ty] = m; };
    set(GgmlType::F32, f32_k_dot, f32_k_multi);
    set(GgmlType::Q8_0, q8_0_k_dot, q8_0_k_multi);
    set(GgmlType::IQ4_NL, iq4_nl_k_dot, iq4_nl_k_multi);
    set(GgmlType::Q2_0, q2_0_k_dot, q2_0_k_multi);
    t.rows2[(int)GgmlType::Q2_0] = q2_0_rows2;
    set(GgmlType::IQ2_XS, iq2_xs_k_dot, iq2_xs_k_multi);
    set(GgmlType::IQ3_XXS, iq3_xxs_k_dot, iq3_xxs_k_multi);
}

}  // namespace
}  // namespace strata::qk
