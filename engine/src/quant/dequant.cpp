// Reference (scalar) dequantizers for every supported block format. The arithmetic order matches gguf-py's
// numpy dequantizers so results are bit-identical (tests/formats/test_dequant_vs_gguf.py).
#pragma GCC optimize("fp-contract=off")  // a fused multiply-add would change the rounding of d*q - m
#include "quant/quant_internal.h"
#include "quant/iq_tables.h"
#include "common/error.h"

namespace strata {
using namespace qk;

namespace {

void deq_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += 32) {
        float d = half_to_float(b[i].d);
        for (int j = 0; j < 32; ++j) y[j] = (float)b[i].qs[j] * d;
    }
}

void deq_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += 32) {
        float d = half_to_float(b[i].d);
        for (int j = 0; j < 16; ++j) {
            y[j] = d * (float)((b[i].qs[j] & 0xF) - 8);
            y[j + 16] = d * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}

void deq_q5_0(const BlockQ5_0* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += 32) {
        float d = half_to_float(b[i].d);
        uint32_t qh = load_u32(b[i].qh);
        for (int j = 0; j < 16; ++j) {
            int lo = (b[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4);
            int hi = (b[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            y[j] = d * (float)(lo - 16);
            y[j + 16] = d * (float)(hi - 16);
        }
    }
}

void deq_q4_1(const BlockQ4_1* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += 32) {
        float d = half_to_float(b[i].d), m = half_to_float(b[i].m);
        for (int j = 0; j < 16; ++j) {
            y[j] = d * (float)(b[i].qs[j] & 0xF) + m;
            y[j + 16] = d * (float)(b[i].qs[j] >> 4) + m;
        }
    }
}

void deq_q5_1(const BlockQ5_1* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += 32) {
        float d = half_to_float(b[i].d), m = half_to_float(b[i].m);
        uint32_t qh = load_u32(b[i].qh);
        for (int j = 0; j < 16; ++j) {
            int lo = (b[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4);
            int hi = (b[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            y[j] = d * (float)lo + m;
            y[j + 16] = d * (float)hi + m;
        }
    }
}

void deq_iq4_nl(const BlockIQ4_NL* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += 32) {
        float d = half_to_float(b[i].d);
        for (int j = 0; j < 16; ++j) {
            y[j] = d * (float)iq::kvalues_iq4nl[b[i].qs[j] & 0xF];
            y[j + 16] = d * (float)iq::kvalues_iq4nl[b[i].qs[j] >> 4];
        }
    }
}

void deq_q2_0(const BlockQ2_0* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += 64) {
        float d = half_to_float(b[i].d);
        for (int j = 0; j < 64; ++j) y[j] = (float)(((b[i].qs[j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
    }
}

void deq_q2_k(const BlockQ2_K* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += QK_K) {
        float d = half_to_float(b[i].d), dmin = half_to_float(b[i].dmin);
        for (int e = 0; e < QK_K; ++e) {
            int h = e / 128, k = (e / 32) % 4, l = e % 32;
            int q = (b[i].qs[h * 32 + l] >> (2 * k)) & 3;
            uint8_t sc = b[i].scales[e / 16];
            float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
            y[e] = dl * (float)q - ml;
        }
    }
}

void deq_q3_k(const BlockQ3_K* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += QK_K) {
        float d = half_to_float(b[i].d);
        int8_t sc[16];
        q3k_scales(b[i].scales, sc);
        for (int e = 0; e < QK_K; ++e) {
            int h = e / 128, k = (e / 32) % 4, l = e % 32;
            int q = (b[i].qs[h * 32 + l] >> (2 * k)) & 3;
            int hbit = (b[i].hmask[l] >> (e / 32)) & 1;
            float dl = d * (float)sc[e / 16];
            y[e] = dl * (float)(q - (hbit ? 0 : 4));
        }
    }
}

void deq_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += QK_K) {
        float d = half_to_float(b[i].d), dmin = half_to_float(b[i].dmin);
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            k4_scale_min(j, b[i].scales, sc, m);
            float dl = d * (float)sc, ml = dmin * (float)m;
            const uint8_t* q = b[i].qs + 32 * (j / 2);
            for (int l = 0; l < 32; ++l) y[32 * j + l] = dl * (float)((q[l] >> (4 * (j % 2))) & 0xF) - ml;
        }
    }
}

void deq_q5_k(const BlockQ5_K* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += QK_K) {
        float d = half_to_float(b[i].d), dmin = half_to_float(b[i].dmin);
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            k4_scale_min(j, b[i].scales, sc, m);
            float dl = d * (float)sc, ml = dmin * (float)m;
            const uint8_t* q = b[i].qs + 32 * (j / 2);
            for (int l = 0; l < 32; ++l) {
                int v = ((q[l] >> (4 * (j % 2))) & 0xF) | (((b[i].qh[l] >> j) & 1) << 4);
                y[32 * j + l] = dl * (float)v - ml;
            }
        }
    }
}

void deq_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += QK_K) {
        float d = half_to_float(b[i].d);
        for (int e = 0; e < QK_K; ++e) {
            int h = e / 128, r = (e % 128) / 32, l = e % 32;
            uint8_t qlb = b[i].ql[h * 64 + (r & 1) * 32 + l];
            int lo = (r < 2 ? qlb : qlb >> 4) & 0xF;
            int hi = (b[i].qh[h * 32 + l] >> (2 * r)) & 3;
            float dl = d * (float)b[i].scales[e / 16];
            y[e] = dl * (float)((lo | (hi << 4)) - 32);
        }
    }
}

void deq_iq4_xs(const BlockIQ4_XS* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += QK_K) {
        float d = half_to_float(b[i].d);
        for (int ib = 0; ib < 8; ++ib) {
            float dl = d * (float)iq4xs_scale(b[i], ib);
            const uint8_t* q = b[i].qs + 16 * ib;
            for (int l = 0; l < 16; ++l) {
                y[32 * ib + l] = dl * (float)iq::kvalues_iq4nl[q[l] & 0xF];
                y[32 * ib + l + 16] = dl * (float)iq::kvalues_iq4nl[q[l] >> 4];
            }
        }
    }
}

// Writes 8 weights db * grid byte * sign, grid row packed in a uint64, signs one bit per weight.
inline void put8(float* y, float db, uint64_t grid, uint8_t signs) {
    for (int k = 0; k < 8; ++k) {
        float g = (float)((grid >> (8 * k)) & 0xFF);
        y[k] = db * g * ((signs >> k) & 1 ? -1.0f : 1.0f);
    }
}

inline void put4(float* y, float db, uint32_t grid, uint8_t signs) {
    for (int k = 0; k < 4; ++k) {
        float g = (float)((grid >> (8 * k)) & 0xFF);
        y[k] = db * g * ((signs >> k) & 1 ? -1.0f : 1.0f);
    }
}

void deq_iq2_xxs(const BlockIQ2_XXS* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        float d = half_to_float(b[i].d);
        for (int ib = 0; ib < 8; ++ib, y += 32) {
            uint32_t idx = load_u32(b[i].qs + 4 * ib), aux = load_u32(b[i].qs + 4 * ib + 2);
            float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
            for (int g = 0; g < 4; ++g)
                put8(y + 8 * g, db, iq::iq2xxs_grid[(idx >> (8 * g)) & 0xFF], iq::ksigns_iq2xs[(aux >> (7 * g)) & 127]);
        }
    }
}

void deq_iq2_xs(const BlockIQ2_XS* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        float d = half_to_float(b[i].d);
        for (int q = 0; q < 32; ++q, y += 8) {
            int s = (b[i].scales[q / 4] >> (4 * ((q / 2) % 2))) & 0xF;
            float db = d * (0.5f + (float)s) * 0.25f;
            put8(y, db, iq::iq2xs_grid[b[i].qs[q] & 511], iq::ksigns_iq2xs[b[i].qs[q] >> 9]);
        }
    }
}

void deq_iq2_s(const BlockIQ2_S* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        float d = half_to_float(b[i].d);
        for (int q = 0; q < 32; ++q, y += 8) {
            int s = (b[i].scales[q / 4] >> (4 * ((q / 2) % 2))) & 0xF;
            float db = d * (0.5f + (float)s) * 0.25f;
            int idx = b[i].qs[q] | (((b[i].qh[q / 4] >> (2 * (q % 4))) & 3) << 8);
            put8(y, db, iq::iq2s_grid[idx], b[i].signs[q]);
        }
    }
}

void deq_iq3_xxs(const BlockIQ3_XXS* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        float d = half_to_float(b[i].d);
        for (int ib = 0; ib < 8; ++ib, y += 32) {
            uint32_t aux = load_u32(b[i].scales_signs + 4 * ib);
            float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
            for (int g = 0; g < 4; ++g) {
                uint8_t signs = iq::ksigns_iq2xs[(aux >> (7 * g)) & 127];
                put4(y + 8 * g, db, iq::iq3xxs_grid[b[i].qs[8 * ib + 2 * g]], signs);
                put4(y + 8 * g + 4, db, iq::iq3xxs_grid[b[i].qs[8 * ib + 2 * g + 1]], signs >> 4);
            }
        }
    }
}

void deq_iq3_s(const BlockIQ3_S* b, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        float d = half_to_float(b[i].d);
        for (int q = 0; q < 32; ++q, y += 8) {
            int s = (b[i].scales[q / 8] >> (4 * ((q / 4) % 2))) & 0xF;
            float db = d * (float)(1 + 2 * s);
            int i0 = 2 * q, i1 = 2 * q + 1;
            int idx0 = b[i].qs[i0] | (((b[i].qh[i0 / 8] >> (i0 % 8)) & 1) << 8);
            int idx1 = b[i].qs[i1] | (((b[i].qh[i1 / 8] >> (i1 % 8)) & 1) << 8);
            put4(y, db, iq::iq3s_grid[idx0], b[i].signs[q]);
            put4(y + 4, db, iq::iq3s_grid[idx1], b[i].signs[q] >> 4);
        }
    }
}

}  // namespace

bool quant_supported(GgmlType t) {
    switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16:
    case GgmlType::Q8_0: case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::IQ4_NL: case GgmlType::Q2_0:
    case GgmlType::Q4_1: case GgmlType::Q5_1:
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
    case GgmlType::IQ4_XS: case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS: case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS: case GgmlType::IQ3_S:
        return true;
    default:
        return false;
    }
}

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
    STRATA_CHECK(quant_supported(t), "dequantize_row: unsupported weight type ", ggml_type_name(t));
    const GgmlTypeInfo& info = ggml_type_info(t);
    STRATA_CHECK(n % info.block_elems == 0, "dequantize_row: n = ", n, " is not a multiple of the ",
                 info.name, " block size ", info.block_elems);
    const int64_t nb = n / info.block_elems;
    switch (t) {
    case GgmlType::F32: std::memcpy(dst, src, (size_t)n * 4); break;
    case GgmlType::F16: {
        const uint16_t* h = (const uint16_t*)src;
        for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(h[i]);
        break;
    }
    case GgmlType::BF16: {
        const uint16_t* h = (const uint16_t*)src;
        for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(h[i]);
        break;
    }
    case GgmlType::Q8_0: deq_q8_0((const BlockQ8_0*)src, dst, nb); break;
    case GgmlType::Q4_0: deq_q4_0((const BlockQ4_0*)src, dst, nb); break;
    case GgmlType::Q5_0: deq_q5_0((const BlockQ5_0*)src, dst, nb); break;
    case GgmlType::Q4_1: deq_q4_1((const BlockQ4_1*)src, dst, nb); break;
    case GgmlType::Q5_1: deq_q5_1((const BlockQ5_1*)src, dst, nb); break;
    case GgmlType::IQ4_NL: deq_iq4_nl((const BlockIQ4_NL*)src, dst, nb); break;
    case GgmlType::Q2_0: deq_q2_0((const BlockQ2_0*)src, dst, nb); break;
    case GgmlType::Q2_K: deq_q2_k((const BlockQ2_K*)src, dst, nb); break;
    case GgmlType::Q3_K: deq_q3_k((const BlockQ3_K*)src, dst, nb); break;
    case GgmlType::Q4_K: deq_q4_k((const BlockQ4_K*)src, dst, nb); break;
    case GgmlType::Q5_K: deq_q5_k((const BlockQ5_K*)src, dst, nb); break;
    case GgmlType::Q6_K: deq_q6_k((const BlockQ6_K*)src, dst, nb); break;
    case GgmlType::IQ4_XS: deq_iq4_xs((const BlockIQ4_XS*)src, dst, nb); break;
    case GgmlType::IQ2_XXS: deq_iq2_xxs((const BlockIQ2_XXS*)src, dst, nb); break;
    case GgmlType::IQ2_XS: deq_iq2_xs((const BlockIQ2_XS*)src, dst, nb); break;
    case GgmlType::IQ2_S: deq_iq2_s((const BlockIQ2_S*)src, dst, nb); break;
    case GgmlType::IQ3_XXS: deq_iq3_xxs((const BlockIQ3_XXS*)src, dst, nb); break;
    case GgmlType::IQ3_S: deq_iq3_s((const BlockIQ3_S*)src, dst, nb); break;
    default: STRATA_ASSERT(false);
    }
}

float fp16_to_f32(uint16_t h) { return half_to_float(h); }
float bf16_to_f32(uint16_t h) { return bf16_to_float(h); }

uint16_t f32_to_fp16(float f) {  // round to nearest even, overflow to inf, NaN stays NaN
    uint32_t x;
    std::memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffff;
    if (ax > 0x7f800000) return (uint16_t)(sign | 0x7e00);
    if (ax >= 0x477ff000) return (uint16_t)(sign | 0x7c00);      // >= 65520 rounds to inf
    if (ax < 0x38800000) {                                       // below the smallest normal half
        if (ax < 0x33000000) return (uint16_t)sign;              // below half the smallest subnormal
        uint32_t man = (ax & 0x7fffff) | 0x800000;
        int shift = 126 - (int)(ax >> 23);                       // 14..24
        uint32_t r = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) ++r;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ax + 0xfff + ((ax >> 13) & 1);                  // round the 13 dropped bits to nearest even
    return (uint16_t)(sign | ((r - 0x38000000) >> 13));
}

}  // namespace strata
