// Multi-activation x86 kernels (one weight row against 1..8 activation rows, the row decoded once) for F32, Q8_0,
// IQ4_NL and Q2_0; the 1-activation instance is also the type's vec_dot kernel, so gemv_rows_multi equals
// vec_dot bit for bit. Included after dot_x86.h by each ISA file; the grid i-quants are in gemv_x86_iq.h, the
// K-quants in gemv_x86_kquant.h.
#pragma once
#include <cmath>
#include "quant/dot_x86.h"

namespace strata::qk {
namespace {

// A kernel template K<NA>(n, w, act, act_stride, out) becomes a DotFn (NA = 1) and a MultiFn (NA = 1..8).
#define STRATA_MULTI_KERNEL(K)                                                                              \
    float K##_dot(int64_t n, const void* w, const void* act) {                                              \
        float o;                                                                                            \
        K<1>(n, w, (const uint8_t*)act, 0, &o);                                                             \
        return o;                                                                                           \
    }                                                                                                       \
    void K##_multi(int64_t n, const void* w, const uint8_t* act, size_t st, int na, float* out) {          \
        switch (na) {                                                                                       \
        case 1: K<1>(n, w, act, st, out); break;                                                            \
        case 2: K<2>(n, w, act, st, out); break;                                                            \
        case 3: K<3>(n, w, act, st, out); break;                                                            \
        case 4: K<4>(n, w, act, st, out); break;                                                            \
        case 5: K<5>(n, w, act, st, out); break;                                                            \
        case 6: K<6>(n, w, act, st, out); break;                                                            \
        case 7: K<7>(n, w, act, st, out); break;                                                            \
        default: K<8>(n, w, act, st, out); break;                                                           \
        }                                                                                                   \
    }

// Two u8 x s8 dot products summed into acc per group of 4 (maddubs path: u0, u1 <= 12 so i16 sums cannot saturate).
inline __m256i dpbusd2_small(__m256i acc, __m256i u0, __m256i s0, __m256i u1, __m256i s1) {
#ifdef STRATA_VNNI
    return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(acc, u0, s0), u1, s1);
#else
    __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(u0, s0), _mm256_maddubs_epi16(u1, s1));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
#endif
}

// acc + pairwise i16 products summed to i32
inline __m256i dpwssd(__m256i acc, __m256i a, __m256i b) {
#ifdef STRATA_VNNI
    return _mm256_dpwssd_epi32(acc, a, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

#ifdef __AVX512BW__
inline __m512i dpbusd512(__m512i acc, __m512i u, __m512i s) {
#ifdef STRATA_VNNI
    return _mm512_dpbusd_epi32(acc, u, s);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
#endif
}

inline __m512i dpwssd512(__m512i acc, __m512i a, __m512i b) {
#ifdef STRATA_VNNI
    return _mm512_dpwssd_epi32(acc, a, b);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
#endif
}
#endif

inline const uint8_t* act_row(const uint8_t* act, size_t st, int t) { return act + (size_t)t * st; }

// ---- F32 ----

template <int NA>
void f32_k(int64_t n, const void* w, const uint8_t* act, size_t st, float* out) {
    const float* x = (const float*)w;
    const float* a[NA];
    for (int t = 0; t < NA; ++t) a[t] = (const float*)act_row(act, st, t);
#ifdef __AVX512F__
    __m512 s0[NA], s1[NA];
    for (int t = 0; t < NA; ++t) s0[t] = s1[t] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);
        for (int t = 0; t < NA; ++t) {
            s0[t] = _mm512_fmadd_ps(x0, _mm512_loadu_ps(a[t] + i), s0[t]);
            s1[t] = _mm512_fmadd_ps(x1, _mm512_loadu_ps(a[t] + i + 16), s1[t]);
        }
    }
    if (i + 16 <= n) {
        __m512 x0 = _mm512_loadu_ps(x + i);
        for (int t = 0; t < NA; ++t) s0[t] = _mm512_fmadd_ps(x0, _mm512_loadu_ps(a[t] + i), s0[t]);
        i += 16;
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 x0 = _mm512_maskz_loadu_ps(m, x + i);
        for (int t = 0; t < NA; ++t) s1[t] = _mm512_fmadd_ps(x0, _mm512_maskz_loadu_ps(m, a[t] + i), s1[t]);
    }
    for (int t = 0; t < NA; ++t) out[t] = _mm512_reduce_add_ps(_mm512_add_ps(s0[t], s1[t]));
#else
    __m256 s0[NA], s1[NA];
    for (int t = 0; t < NA; ++t) s0[t] = s1[t] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
        for (int t = 0; t < NA; ++t) {
            s0[t] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(a[t] + i), s0[t]);
            s1[t] = _mm256_fmadd_ps(x1, _mm256_loadu_ps(a[t] + i + 8), s1[t]);
        }
    }
    if (i + 8 <= n) {
        __m256 x0 = _mm256_loadu_ps(x + i);
        for (int t = 0; t < NA; ++t) s0[t] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(a[t] + i), s0[t]);
        i += 8;
    }
    for (int t = 0; t < NA; ++t) {
        float sum = hsum8(_mm256_add_ps(s0[t], s1[t]));
        for (int64_t k = i; k < n; ++k) sum = std::fma(x[k], a[t][k], sum);
        out[t] = sum;
    }
#endif
}
STRATA_MULTI_KERNEL(f32_k)

// ---- 32-blocks of signed bytes (Q8_0, IQ4_NL) x Q8_0 ----

// Block i's 32 weights as signed bytes (|w| <= 127) and its fp16 scale.
struct DecodeQ8_0 {
    const BlockQ8_0* x;
    __m256i operator()(int64_t i) const { return _mm256_loadu_si256((const __m256i*)x[i].qs); }
    uint16_t d(int64_t i) const { return x[i].d; }
};
struct DecodeIQ4_NL {
    const BlockIQ4_NL* x;
    __m256i table;
    __m256i operator()(int64_t i) const { return _mm256_shuffle_epi8(table, nibbles32(x[i].qs)); }
    uint16_t d(int64_t i) const { return x[i].d; }
};

// sum over blocks of d_w * d_a * (integer dot); even and odd blocks go to separate accumulators.
template <int NA, typename Decode>
void signed32_k(int64_t n, const Decode& dec, const uint8_t* act, size_t st, float* out) {
    const BlockQ8_0* a[NA];
    for (int t = 0; t < NA; ++t) a[t] = (const BlockQ8_0*)act_row(act, st, t);
    const int64_t nb = n / 32;
    const __m256i z = _mm256_setzero_si256();
    __m256 acc0[NA], acc1[NA];
    for (int t = 0; t < NA; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
    auto step = [&](__m256 acc, __m256i ax, __m256i xv, float d, const BlockQ8_0& ab) {
        __m256i p = dpbusd(z, ax, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i*)ab.qs), xv));
        return _mm256_fmadd_ps(_mm256_set1_ps(d * h2f(ab.d)), _mm256_cvtepi32_ps(p), acc);
    };
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m256i x0 = dec(i), x1 = dec(i + 1);
        __m256i ax0 = _mm256_sign_epi8(x0, x0), ax1 = _mm256_sign_epi8(x1, x1);
        float d0 = h2f(dec.d(i)), d1 = h2f(dec.d(i + 1));
        for (int t = 0; t < NA; ++t) {
            acc0[t] = step(acc0[t], ax0, x0, d0, a[t][i]);
            acc1[t] = step(acc1[t], ax1, x1, d1, a[t][i + 1]);
        }
    }
    if (i < nb) {
        __m256i x0 = dec(i), ax0 = _mm256_sign_epi8(x0, x0);
        float d0 = h2f(dec.d(i));
        for (int t = 0; t < NA; ++t) acc0[t] = step(acc0[t], ax0, x0, d0, a[t][i]);
    }
    for (int t = 0; t < NA; ++t) out[t] = hsum8(_mm256_add_ps(acc0[t], acc1[t]));
}

template <int NA>
void q8_0_k(int64_t n, const void* w, const uint8_t* act, size_t st, float* out) {
    signed32_k<NA>(n, DecodeQ8_0{(const BlockQ8_0*)w}, act, st, out);
}
STRATA_MULTI_KERNEL(q8_0_k)

template <int NA>
void iq4_nl_k(int64_t n, const void* w, const uint8_t* act, size_t st, float* out) {
    signed32_k<NA>(n, DecodeIQ4_NL{(const BlockIQ4_NL*)w, iq4nl_table()}, act, st, out);
}
STRATA_MULTI_KERNEL(iq4_nl_k)

// ---- Q2_0 x Q8_0 (with the Q2_0ActGroup data quantize_act appends) ----
// A 16-byte block broadcast to both 128-bit lanes and masked with 0x03 (low lane) / 0x0C (high lane), then shifted
// right by 4 and masked the same way, gives codes 0..31 (32..63) in the order of Q2_0ActGroup::perm, those of the
// high lane times 4 (Q2_0ActGroup scales that lane's negsum by 4 and its dscale by 1/4, exact powers of two);
// starting the dot from negsum subtracts the activations once (code - 1). One shift and two ands per block instead
// of two variable shifts, and the fp16 weight scale converted from memory: 2.8 instead of 4.1 TSC ticks per block in
// L2 on a Sapphire Rapids VM. 256-bit on every ISA: a 512-bit version measured slower on Zen 4 (8-9.7 vs 12.3 GB/s
// in cache).

// NR weight rows (at stride row_bytes) against NA activation rows: out[r * NA + t]. Every (row, activation) pair
// takes the same instructions in the same order whatever NR and NA are, so all instances agree bit for bit.
template <int NR, int NA>
void q2_0_rows(int64_t n, const void* w, size_t row_bytes, const uint8_t* act, size_t st, float* out) {
    const BlockQ2_0* x[NR];
    for (int r = 0; r < NR; ++r) x[r] = (const BlockQ2_0*)((const uint8_t*)w + (size_t)r * row_bytes);
    const Q2_0ActGroup* g[NA];
    for (int t = 0; t < NA; ++t) g[t] = q2_0_act_groups(act_row(act, st, t), n);
    const int64_t nb = n / 64;
    const __m256i mask = _mm256_setr_epi64x(0x0303030303030303, 0x0303030303030303, 0x0C0C0C0C0C0C0C0C,
                                            0x0C0C0C0C0C0C0C0C);
    // sum over the 8 lanes of dscale * d * (integer dot) for one block against group e, into acc
    auto block = [&](__m256 acc, const Q2_0ActGroup& e, __m256i c_lo, __m256i c_hi, __m256 d) {
        __m256i p = dpbusd2_small(load256(e.negsum), c_lo, load256(e.perm), c_hi, load256(e.perm + 32));
        return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(_mm256_loadu_ps(e.dscale), d), acc);
    };
    auto codes = [&](const BlockQ2_0& b, __m256i& c_lo, __m256i& c_hi) {
        const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)b.qs));
        c_lo = _mm256_and_si256(q, mask);
        c_hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
    };
    // the block's fp16 scale in every lane (the 8-byte load covers d and the first 6 code bytes)
    auto scale = [&](const BlockQ2_0& b) {
        return _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_loadl_epi64((const __m128i*)&b)));
    };
    __m256 acc0[NR][NA], acc1[NR][NA];
    for (int r = 0; r < NR; ++r)
        for (int t = 0; t < NA; ++t) acc0[r][t] = acc1[r][t] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        for (int r = 0; r < NR; ++r) {
            __m256i c0l, c0h, c1l, c1h;
            codes(x[r][i], c0l, c0h);
            codes(x[r][i + 1], c1l, c1h);
            const __m256 d0 = scale(x[r][i]), d1 = scale(x[r][i + 1]);
            for (int t = 0; t < NA; ++t) {
                acc0[r][t] = block(acc0[r][t], g[t][i], c0l, c0h, d0);
                acc1[r][t] = block(acc1[r][t], g[t][i + 1], c1l, c1h, d1);
            }
        }
    }
    if (i < nb) {
        for (int r = 0; r < NR; ++r) {
            __m256i c0l, c0h;
            codes(x[r][i], c0l, c0h);
            const __m256 d0 = scale(x[r][i]);
            for (int t = 0; t < NA; ++t) acc0[r][t] = block(acc0[r][t], g[t][i], c0l, c0h, d0);
        }
    }
    for (int r = 0; r < NR; ++r)
        for (int t = 0; t < NA; ++t) out[r * NA + t] = hsum8(_mm256_add_ps(acc0[r][t], acc1[r][t]));
}

template <int NA>
void q2_0_k(int64_t n, const void* w, const uint8_t* act, size_t st, float* out) {
    q2_0_rows<1, NA>(n, w, 0, act, st, out);
}
STRATA_MULTI_KERNEL(q2_0_k)

// Two weight rows against one activation row (gemv_rows' pairs): the activation loads shared, the per-row overhead
// halved; out[r] equals q2_0_k_dot of row r bit for bit.
void q2_0_rows2(int64_t n, const void* w, size_t row_bytes, const void* act, float* out) {
    q2_0_rows<2, 1>(n, w, row_bytes, (const uint8_t*)act, 0, out);
}


}  // namespace
}  // namespace strata::qk
