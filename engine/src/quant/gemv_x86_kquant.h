// Multi-activation x86 kernels for the K-quants Q2_K, Q3_K, Q4_K, Q5_K and Q6_K against 1..8 Q8_K activation rows
// (the weight row decoded once per 32 weights, shared by every activation). Included after gemv_x86.h by each ISA
// file. Per 32 weights: u8 codes x s8 activations (maddubs), times the i16 scale of each 16- or 32-weight sub-block
// (dpwssd); constant offsets (Q3_K -4, Q6_K -32) and mins come from the Q8_K block sums once per super-block.
#pragma once
#include "quant/gemv_x86.h"

namespace strata::qk {
namespace {

// The i16 words k0 (low 128-bit lane) and k1 (high lane) of a 16-word vector, each broadcast over its lane.
// Source: v_lo holds words 0..7 in both lanes, v_hi words 8..15; k0 and k1 must come from the same one.
inline __m256i word_pair(__m256i v_lo, __m256i v_hi, int k0, int k1) {
    const int c0 = (2 * (k0 & 7)) | (2 * (k0 & 7) + 1) << 8, c1 = (2 * (k1 & 7)) | (2 * (k1 & 7) + 1) << 8;
    const __m256i ctrl = _mm256_setr_epi32(c0 * 0x10001, c0 * 0x10001, c0 * 0x10001, c0 * 0x10001,
                                           c1 * 0x10001, c1 * 0x10001, c1 * 0x10001, c1 * 0x10001);
    return _mm256_shuffle_epi8(k0 < 8 ? v_lo : v_hi, ctrl);
}

// 16 i16 scales (one per 16 weights) split so word_pair can pick any pair (2c, 2c+1).
struct Scales16 {
    __m256i all, lo, hi;
    explicit Scales16(__m256i s16)
        : all(s16), lo(_mm256_permute2x128_si256(s16, s16, 0x00)), hi(_mm256_permute2x128_si256(s16, s16, 0x11)) {}
    __m256i chunk(int c) const { return word_pair(lo, hi, 2 * c, 2 * c + 1); }  // weights 32c..32c+31
};

template <int NA>
inline void load_acts(const uint8_t* act, size_t st, const BlockQ8_K* (&a)[NA]) {
    for (int t = 0; t < NA; ++t) a[t] = (const BlockQ8_K*)act_row(act, st, t);
}

// The i32 sums of one super-block for NA activations. dpwssd has a latency of several cycles, so with one or two
// activations the 8 chunks go round-robin into 4 or 2 independent sums per activation (exact integers: the split
// changes no result, so NA = 1 and NA = 8 still agree bit for bit).
template <int NA>
struct SuperSums {
    static constexpr int P = NA == 1 ? 4 : NA == 2 ? 2 : 1;
    __m256i s[P][NA];
    SuperSums() {
        for (int p = 0; p < P; ++p)
            for (int t = 0; t < NA; ++t) s[p][t] = _mm256_setzero_si256();
    }
    // chunk c (32 weights) of activation t: i16 pair sums times i16 scales
    void add(int c, int t, __m256i pairs, __m256i scales) { s[c % P][t] = dpwssd(s[c % P][t], pairs, scales); }
    __m256i total(int t) const {
        __m256i v = s[0][t];
        for (int p = 1; p < P; ++p) v = _mm256_add_epi32(v, s[p][t]);
        return v;
    }
};

// ---- Q6_K: 6-bit codes q (value q - 32), 16 signed 8-bit scales ----

template <int NA>
void q6_k_k(int64_t n, const void* w, const uint8_t* act, size_t st, float* out) {
    const BlockQ6_K* x = (const BlockQ6_K*)w;
    const BlockQ8_K* a[NA];
    load_acts<NA>(act, st, a);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256 acc[NA];
    for (int t = 0; t < NA; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const BlockQ6_K& b = x[i];
        const Scales16 sc(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)b.scales)));
        SuperSums<NA> sums;
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {  // 128 weights: ql[64h..64h+63] low/high nibbles, qh[32h..] bit pairs
            const __m256i ql0 = load256(b.ql + 64 * h), ql1 = load256(b.ql + 64 * h + 32);
            const __m256i qh = load256(b.qh + 32 * h);
            const __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)),
                _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30))};
#pragma GCC unroll 4
            for (int r = 0; r < 4; ++r) {
                const int c = 4 * h + r;
                const __m256i s = sc.chunk(c);
                for (int t = 0; t < NA; ++t)
                    sums.add(c, t, _mm256_maddubs_epi16(q[r], load256(a[t][i].qs + 32 * c)), s);
            }
        }
        const float d = h2f(b.d);
        for (int t = 0; t < NA; ++t) {  // minus 32 * sum_g scale[g] * bsums[g]
            const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(sc.all, load256(a[t][i].bsums)), 5);
            const __m256i sumi = _mm256_sub_epi32(sums.total(t), off);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(a[t][i].d * d), _mm256_cvtepi32_ps(sumi), acc[t]);
        }
    }
    for (int t = 0; t < NA; ++t) out[t] = hsum8(acc[t]);
}
STRATA_MULTI_KERNEL(q6_k_k)

// ---- Q2_K: 2-bit codes, per 16 weights a 4-bit scale and a 4-bit min ----

template <int NA>
void q2_k_k(int64_t n, const void* w, const uint8_t* act, size_t st, float* out) {
    const BlockQ2_K* x = (const BlockQ2_K*)w;
    const BlockQ8_K* a[NA];
    load_acts<NA>(act, st, a);
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc[NA];
    for (int t = 0; t < NA; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const BlockQ2_K& b = x[i];
        const __m128i s8 = _mm_loadu_si128((const __m128i*)b.scales);
        const __m128i m0f = _mm_set1_epi8(0x0F);
        const Scales16 sc(_mm256_cvtepu8_epi16(_mm_and_si128(s8, m0f)));
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), m0f));
        SuperSums<NA> sums;
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {  // 128 weights: qs[32h..32h+31], bit pairs 0..3 give weights 32r..32r+31
            const __m256i q = load256(b.qs + 32 * h);
#pragma GCC unroll 4
            for (int r = 0; r < 4; ++r) {
                const int c = 4 * h + r;
                const __m256i qc = _mm256_and_si256(_mm256_srli_epi16(q, 2 * r), m3);
                const __m256i s = sc.chunk(c);
                for (int t = 0; t < NA; ++t)
                    sums.add(c, t, _mm256_maddubs_epi16(qc, load256(a[t][i].qs + 32 * c)), s);
            }
        }
        const float d = h2f(b.d), dmin = h2f(b.dmin);
        for (int t = 0; t < NA; ++t) {
            const __m256i msum = _mm256_madd_epi16(mins, load256(a[t][i].bsums));
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(a[t][i].d * d), _mm256_cvtepi32_ps(sums.total(t)), acc[t]);
            acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(a[t][i].d * dmin), _mm256_cvtepi32_ps(msum), acc[t]);
        }
    }
    for (int t = 0; t < NA; ++t) out[t] = hsum8(acc[t]);
}
STRATA_MULTI_KERNEL(q2_k_k)

// ---- Q3_K: 2-bit codes + a high bit (value q + 4*hbit - 4), 16 signed 6-bit scales ----

// The 16 scales minus 32 as bytes, from the 12 packed bytes (ggml's layout: low nibbles in bytes 0..7, the high
// bit pairs in bytes 8..11).
inline __m128i q3k_scale_bytes(const uint8_t* s) {
    const uint32_t k2 = 0x0f0f0f0f, k1 = 0x03030303;
    uint32_t u[3];
    std::memcpy(u, s, 12);
    const uint32_t s0 = (u[0] & k2) | ((u[2] & k1) << 4), s1 = (u[1] & k2) | (((u[2] >> 2) & k1) << 4);
    const uint32_t s2 = ((u[0] >> 4) & k2) | (((u[2] >> 4) & k1) << 4);
    const uint32_t s3 = ((u[1] >> 4) & k2) | (((u[2] >> 6) & k1) << 4);
    return _mm_sub_epi8(_mm_setr_epi32((int)s0, (int)s1, (int)s2, (int)s3), _mm_set1_epi8(32));
}

// Bit j of each byte moved to bit 2 (j = 0..7), other bits arbitrary.
template <int J>
inline __m256i bit_to_2(__m256i v) {
    if constexpr (J < 2) return _mm256_slli_epi16(v, 2 - J);
    else if constexpr (J == 2) return v;
    else return _mm256_srli_epi16(v, J - 2);
}

template <int NA>
void q3_k_k(int64_t n, const void* w, const uint8_t* act, size_t st, float* out) {
    const BlockQ3_K* x = (const BlockQ3_K*)w;
    const BlockQ8_K* a[NA];
    load_acts<NA>(act, st, a);
    const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(4);
    __m256 acc[NA];
    for (int t = 0; t < NA; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const BlockQ3_K& b = x[i];
        const Scales16 sc(_mm256_cvtepi8_epi16(q3k_scale_bytes(b.scales)));
        SuperSums<NA> sums;
        const __m256i hm = load256(b.hmask);
        const __m256i q0 = load256(b.qs), q1 = load256(b.qs + 32);
        // weights 32c..32c+31: bit pair c%4 of qs[32(c/4)..], bit c of hmask
        const __m256i u[8] = {
            _mm256_or_si256(_mm256_and_si256(q0, m3), _mm256_and_si256(bit_to_2<0>(hm), m4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q0, 2), m3), _mm256_and_si256(bit_to_2<1>(hm), m4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q0, 4), m3), _mm256_and_si256(bit_to_2<2>(hm), m4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q0, 6), m3), _mm256_and_si256(bit_to_2<3>(hm), m4)),
            _mm256_or_si256(_mm256_and_si256(q1, m3), _mm256_and_si256(bit_to_2<4>(hm), m4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q1, 2), m3), _mm256_and_si256(bit_to_2<5>(hm), m4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q1, 4), m3), _mm256_and_si256(bit_to_2<6>(hm), m4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q1, 6), m3), _mm256_and_si256(bit_to_2<7>(hm), m4))};
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
            const __m256i s = sc.chunk(c);
            for (int t = 0; t < NA; ++t)
                sums.add(c, t, _mm256_maddubs_epi16(u[c], load256(a[t][i].qs + 32 * c)), s);
        }
        const float d = h2f(b.d);
        for (int t = 0; t < NA; ++t) {  // minus 4 * sum_g scale[g] * bsums[g]
            const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(sc.all, load256(a[t][i].bsums)), 2);
            const __m256i sumi = _mm256_sub_epi32(sums.total(t), off);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(a[t][i].d * d), _mm256_cvtepi32_ps(sumi), acc[t]);
        }
    }
    for (int t = 0; t < NA; ++t) out[t] = hsum8(acc[t]);
}
STRATA_MULTI_KERNEL(q3_k_k)

// ---- Q4_K / Q5_K: 4-bit codes (+ a fifth bit from qh), per 32 weights a 6-bit scale and a 6-bit min ----

template <int NA, bool Q5>
void q45_k_k(int64_t n, const void* w, const uint8_t* act, size_t st, float* out) {
    using Block = std::conditional_t<Q5, BlockQ5_K, BlockQ4_K>;
    const Block* x = (const Block*)w;
    const BlockQ8_K* a[NA];
    load_acts<NA>(act, st, a);
    const __m256i m4 = _mm256_set1_epi8(0x0F), b16 = _mm256_set1_epi8(16);
    // each min twice: i16 word g = min of sub-block g/2, matching the 16 block sums
    const __m128i dup_mins = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    __m256 acc[NA];
    for (int t = 0; t < NA; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        uint32_t sm[4];
        k4_unpack_scales(x[i].scales, sm);
        const __m128i s8 = _mm_setr_epi32((int)sm[0], (int)sm[1], (int)sm[2], (int)sm[3]);  // 8 scales, 8 mins
        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(s8));             // scales as i16
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(s8, dup_mins));
        __m256i hbits;
        if constexpr (Q5) hbits = load256(x[i].qh);
        SuperSums<NA> sums;
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
            __m256i q = load256(x[i].qs + 32 * c);
            __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if constexpr (Q5) {  // bit 2c / 2c+1 of qh[l] is bit 4 of sub-block 2c / 2c+1
                const __m256i h = _mm256_srli_epi16(hbits, 2 * c);
                lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(h, 4), b16));
                hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(h, 3), b16));
            }
            const __m256i sl = word_pair(sc16, sc16, 2 * c, 2 * c), sh = word_pair(sc16, sc16, 2 * c + 1, 2 * c + 1);
            for (int t = 0; t < NA; ++t) {
                sums.add(2 * c, t, _mm256_maddubs_epi16(lo, load256(a[t][i].qs + 64 * c)), sl);
                sums.add(2 * c + 1, t, _mm256_maddubs_epi16(hi, load256(a[t][i].qs + 64 * c + 32)), sh);
            }
        }
        const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
        for (int t = 0; t < NA; ++t) {
            const __m256i msum = _mm256_madd_epi16(mins, load256(a[t][i].bsums));
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(a[t][i].d * d), _mm256_cvtepi32_ps(sums.total(t)), acc[t]);
            acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(a[t][i].d * dmin), _mm256_cvtepi32_ps(msum), acc[t]);
        }
    }
    for (int t = 0; t < NA; ++t) out[t] = hsum8(acc[t]);
}

template <int NA>
void q4_k_k(int64_t n, const void* w, const uint8_t* act, size_t st, float* out) {
    q45_k_k<NA, false>(n, w, act, st, out);
}
STRATA_MULTI_KERNEL(q4_k_k)

template <int NA>
void q5_k_k(int64_t n, const void* w, const uint8_t* act, size_t st, float* out) {
    q45_k_k<NA, true>(n, w, act, st, out);
}
STRATA_MULTI_KERNEL(q5_k_k)

void fill_x86_kquant(DotTable& t) {
    auto set = [&](GgmlType ty, DotFn f, MultiFn m) { t.dot[(int)ty] = f; t.multi[(int)ty] = m; };
    set(GgmlType::Q2_K, q2_k_k_dot, q2_k_k_multi);
    set(GgmlType::Q3_K, q3_k_k_dot, q3_k_k_multi);
    set(GgmlType::Q4_K, q4_k_k_dot, q4_k_k_multi);
    set(GgmlType::Q5_K, q5_k_k_dot, q5_k_k_multi);
    set(GgmlType::Q6_K, q6_k_k_dot, q6_k_k_multi);
}

}  // namespace
}  // namespace strata::qk
