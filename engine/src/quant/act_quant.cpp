// Activation quantizers: Q8_0 (32 int8 + fp16 scale) and Q8_K (256 int8 + f32 scale + 16 sums of 16),
// laid out as in ggml, and the choice of activation format per weight type.
#include <cmath>
#include "quant/quant_internal.h"
#include "common/error.h"

namespace strata {
using namespace qk;

ActFormat act_format(GgmlType t) {
    switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16:
        return ActFormat::F32;
    case GgmlType::Q8_0: case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::IQ4_NL: case GgmlType::Q2_0:
    case GgmlType::Q4_1: case GgmlType::Q5_1:
        return ActFormat::Q8_0;
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
    case GgmlType::IQ4_XS: case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS: case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS: case GgmlType::IQ3_S:
        return ActFormat::Q8_K;
    default:
        fail("act_format: unsupported weight type ", ggml_type_name(t));
    }
}

static int64_t act_block(ActFormat f) { return f == ActFormat::F32 ? 1 : f == ActFormat::Q8_0 ? 32 : QK_K; }

size_t act_bytes(GgmlType t, int64_t n) {
    ActFormat f = act_format(t);
    STRATA_CHECK(n % act_block(f) == 0, "act_bytes: n = ", n, " is not a multiple of the activation block ",
                 act_block(f), " for ", ggml_type_name(t));
    switch (f) {
    case ActFormat::F32: return (size_t)n * 4;
    case ActFormat::Q8_0:
        return (size_t)(n / 32) * sizeof(BlockQ8_0) + (t == GgmlType::Q2_0 ? (size_t)(n / 64) * sizeof(Q2_0ActGroup) : 0);
    case ActFormat::Q8_K: return (size_t)(n / QK_K) * sizeof(BlockQ8_K);
    }
    return 0;
}

// The quantizers below must give exactly the int8 values of (int8_t)std::nearbyint(x * id) in the default rounding
// mode (what the oracle tests and ggml expect). GCC turns std::nearbyint into a libm call per value (~6 ns) unless
// built for SSE4.1, so on x86-64 the SSE2 path converts with cvtps2dq instead: it rounds in the current rounding
// mode like nearbyint, and there is no add after the multiply that the compiler could fuse into an FMA (a39709a's
// (v + 1.5*2^23) - 1.5*2^23 gives other integers near .5 ties in builds with FMA: the product skips its rounding).
// test_act_quant compares both paths with a std::nearbyint reference bit for bit.
#if defined(__SSE2__) || defined(_M_X64) || (defined(_M_IX86_FP) && _M_IX86_FP >= 2)
#define STRATA_ACT_QUANT_SSE2 1
#include <emmintrin.h>

// Largest |x| of n floats (n a multiple of 4); a NaN is skipped as std::fmax does (maxps returns its second
// operand when the first is NaN).
static inline float abs_max_sse2(const float* x, int n) {
    const __m128 sign = _mm_set1_ps(-0.0f);
    __m128 m = _mm_setzero_ps();
    for (int j = 0; j < n; j += 4) m = _mm_max_ps(_mm_andnot_ps(sign, _mm_loadu_ps(x + j)), m);
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

// 16 rounded int32 -> 16 int8 keeping the low byte of each, as the scalar (int8_t) conversion does on x86
// (a NaN or infinite product converts to 0x80000000, whose low byte is 0).
static inline __m128i low_bytes_16(__m128i a, __m128i b, __m128i c, __m128i d) {
    const __m128i ff = _mm_set1_epi32(0xff);
    __m128i ab = _mm_packs_epi32(_mm_and_si128(a, ff), _mm_and_si128(b, ff));
    __m128i cd = _mm_packs_epi32(_mm_and_si128(c, ff), _mm_and_si128(d, ff));
    return _mm_packus_epi16(ab, cd);
}

static void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += 32) {
        float d = abs_max_sse2(x, 32) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        const __m128 vid = _mm_set1_ps(id);
        __m128i r[8];
        for (int k = 0; k < 8; ++k) r[k] = _mm_cvtps_epi32(_mm_mul_ps(_mm_loadu_ps(x + 4 * k), vid));
        _mm_storeu_si128((__m128i*)y[i].qs, low_bytes_16(r[0], r[1], r[2], r[3]));
        _mm_storeu_si128((__m128i*)(y[i].qs + 16), low_bytes_16(r[4], r[5], r[6], r[7]));
    }
}

static void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t nb) {
    const __m128 lo = _mm_set1_ps(-127.0f), hi = _mm_set1_ps(127.0f);
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        float d = abs_max_sse2(x, QK_K) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = d;
        const __m128 vid = _mm_set1_ps(id);
        for (int g = 0; g < 16; ++g) {
            // Clamp before rounding (the same integers, since +-127 are integers): maxps(p, -127) gives -127 for
            // a NaN p as std::fmax(-127, NaN) does, and +-inf clamp to +-127.
            __m128i r[4];
            for (int k = 0; k < 4; ++k) {
                __m128 p = _mm_mul_ps(_mm_loadu_ps(x + 16 * g + 4 * k), vid);
                r[k] = _mm_cvtps_epi32(_mm_min_ps(_mm_max_ps(p, lo), hi));
            }
            __m128i w0 = _mm_packs_epi32(r[0], r[1]), w1 = _mm_packs_epi32(r[2], r[3]);
            _mm_storeu_si128((__m128i*)(y[i].qs + 16 * g), _mm_packs_epi16(w0, w1));
            __m128i s = _mm_madd_epi16(_mm_add_epi16(w0, w1), _mm_set1_epi16(1));  // 4 int32 partial sums
            s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
            s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
            y[i].bsums[g] = (int16_t)_mm_cvtsi128_si32(s);
        }
    }
}
#else
static void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < 32; ++j) y[i].qs[j] = (int8_t)std::nearbyint(x[j] * id);
    }
}

static void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        float amax = 0.0f;
        for (int j = 0; j < QK_K; ++j) amax = std::fmax(amax, std::fabs(x[j]));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = d;
        for (int j = 0; j < QK_K; ++j) {
            float v = std::nearbyint(x[j] * id);
            y[i].qs[j] = (int8_t)std::fmin(127.0f, std::fmax(-127.0f, v));
        }
        for (int g = 0; g < 16; ++g) {
            int s = 0;
            for (int j = 0; j < 16; ++j) s += y[i].qs[16 * g + j];
            y[i].bsums[g] = (int16_t)s;
        }
    }
}
#endif

static void q2_0_act_groups(const BlockQ8_0* blocks, Q2_0ActGroup* g, int64_t ngroups) {
    for (int64_t i = 0; i < ngroups; ++i) {
        const BlockQ8_0* ab = blocks + 2 * i;
        for (int s = 0; s < 4; ++s)
            for (int k = 0; k < 16; ++k) {
                int e = 4 * k + s;
                g[i].perm[16 * s + k] = ab[e / 32].qs[e % 32];
            }
        for (int l = 0; l < 8; ++l) {
            int s = 0;
            for (int b = 0; b < 4; ++b) s += g[i].perm[4 * l + b] + g[i].perm[32 + 4 * l + b];
            // lanes 4..7 see codes times 4 (gemv_x86.h's q2_0_k): scaled back here, exactly
            g[i].negsum[l] = l < 4 ? -s : -4 * s;
            g[i].dscale[l] = half_to_float(ab[(l % 4) < 2 ? 0 : 1].d) * (l < 4 ? 1.0f : 0.25f);
        }
    }
}

void quantize_act(GgmlType t, const float* x, void* act, int64_t n) {
    act_bytes(t, n);  // validates n
    switch (act_format(t)) {
    case ActFormat::F32: std::memcpy(act, x, (size_t)n * 4); break;
    case ActFormat::Q8_0:
        quantize_q8_0(x, (BlockQ8_0*)act, n / 32);
        if (t == GgmlType::Q2_0)
            q2_0_act_groups((const BlockQ8_0*)act, (Q2_0ActGroup*)((uint8_t*)act + (n / 32) * sizeof(BlockQ8_0)), n / 64);
        break;
    case ActFormat::Q8_K: quantize_q8_k(x, (BlockQ8_K*)act, n / QK_K); break;
    }
}

}  // namespace strata
