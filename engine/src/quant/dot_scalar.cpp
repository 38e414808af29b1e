// Scalar reference dot products: weight row x activation row, integer sums per sub-block then the scales,
// as ggml's reference kernels do. Every SIMD kernel is tested against these (tests/test_quant_dot.cpp).
#include "quant/quant_internal.h"
#include "quant/iq_tables.h"

namespace strata::qk {
namespace {

float dot_f32(int64_t n, const void* w, const void* act) {
    const float* x = (const float*)w;
    const float* a = (const float*)act;
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += (double)x[i] * a[i];
    return (float)s;
}

float dot_f16(int64_t n, const void* w, const void* act) {
    const uint16_t* x = (const uint16_t*)w;
    const float* a = (const float*)act;
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += (double)half_to_float(x[i]) * a[i];
    return (float)s;
}

float dot_bf16(int64_t n, const void* w, const void* act) {
    const uint16_t* x = (const uint16_t*)w;
    const float* a = (const float*)act;
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += (double)bf16_to_float(x[i]) * a[i];
    return (float)s;
}

float dot_q8_0(int64_t n, const void* w, const void* act) {
    const BlockQ8_0* x = (const BlockQ8_0*)w;
    const BlockQ8_0* a = (const BlockQ8_0*)act;
    float sum = 0;
    for (int64_t i = 0; i < n / 32; ++i) {
        int s = 0;
        for (int j = 0; j < 32; ++j) s += x[i].qs[j] * a[i].qs[j];
        sum += half_to_float(x[i].d) * half_to_float(a[i].d) * (float)s;
    }
    return sum;
}

float dot_q4_0(int64_t n, const void* w, const void* act) {
    const BlockQ4_0* x = (const BlockQ4_0*)w;
    const BlockQ8_0* a = (const BlockQ8_0*)act;
    float sum = 0;
    for (int64_t i = 0; i < n / 32; ++i) {
        int s = 0;
        for (int j = 0; j < 16; ++j)
            s += ((x[i].qs[j] & 0xF) - 8) * a[i].qs[j] + ((x[i].qs[j] >> 4) - 8) * a[i].qs[j + 16];
        sum += half_to_float(x[i].d) * half_to_float(a[i].d) * (float)s;
    }
    return sum;
}

float dot_q5_0(int64_t n, const void* w, const void* act) {
    const BlockQ5_0* x = (const BlockQ5_0*)w;
    const BlockQ8_0* a = (const BlockQ8_0*)act;
    float sum = 0;
    for (int64_t i = 0; i < n / 32; ++i) {
        uint32_t qh = load_u32(x[i].qh);
        int s = 0;
        for (int j = 0; j < 16; ++j) {
            int lo = ((x[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - 16;
            int hi = ((x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
            s += lo * a[i].qs[j] + hi * a[i].qs[j + 16];
        }
        sum += half_to_float(x[i].d) * half_to_float(a[i].d) * (float)s;
    }
    return sum;
}

// Q4_1 / Q5_1 (weight d*q + m) x Q8_0: d*da*sum(q*qa) + m*da*sum(qa).
float dot_q4_1(int64_t n, const void* w, const void* act) {
    const BlockQ4_1* x = (const BlockQ4_1*)w;
    const BlockQ8_0* a = (const BlockQ8_0*)act;
    float sum = 0;
    for (int64_t i = 0; i < n / 32; ++i) {
        int s = 0, sa = 0;
        for (int j = 0; j < 16; ++j) {
            s += (x[i].qs[j] & 0xF) * a[i].qs[j] + (x[i].qs[j] >> 4) * a[i].qs[j + 16];
            sa += a[i].qs[j] + a[i].qs[j + 16];
        }
        float da = half_to_float(a[i].d);
        sum += half_to_float(x[i].d) * da * (float)s + half_to_float(x[i].m) * da * (float)sa;
    }
    return sum;
}

float dot_q5_1(int64_t n, const void* w, const void* act) {
    const BlockQ5_1* x = (const BlockQ5_1*)w;
    const BlockQ8_0* a = (const BlockQ8_0*)act;
    float sum = 0;
    for (int64_t i = 0; i < n / 32; ++i) {
        uint32_t qh = load_u32(x[i].qh);
        int s = 0, sa = 0;
        for (int j = 0; j < 16; ++j) {
            int lo = (x[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4);
            int hi = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            s += lo * a[i].qs[j] + hi * a[i].qs[j + 16];
            sa += a[i].qs[j] + a[i].qs[j + 16];
        }
        float da = half_to_float(a[i].d);
        sum += half_to_float(x[i].d) * da * (float)s + half_to_float(x[i].m) * da * (float)sa;
    }
    return sum;
}

float dot_iq4_nl(int64_t n, const void* w, const void* act) {
    const BlockIQ4_NL* x = (const BlockIQ4_NL*)w;
    const BlockQ8_0* a = (const BlockQ8_0*)act;
    float sum = 0;
    for (int64_t i = 0; i < n / 32; ++i) {
        int s = 0;
        for (int j = 0; j < 16; ++j)
            s += iq::kvalues_iq4nl[x[i].qs[j] & 0xF] * a[i].qs[j] + iq::kvalues_iq4nl[x[i].qs[j] >> 4] * a[i].qs[j + 16];
        sum += half_to_float(x[i].d) * half_to_float(a[i].d) * (float)s;
    }
    return sum;
}

float dot_q2_0(int64_t n, const void* w, const void* act) {
    const BlockQ2_0* x = (const BlockQ2_0*)w;
    const BlockQ8_0* a = (const BlockQ8_0*)act;
    float sum = 0;
    for (int64_t i = 0; i < n / 64; ++i) {
        float d = half_to_float(x[i].d);
        for (int h = 0; h < 2; ++h) {
            const BlockQ8_0& ab = a[2 * i + h];
            int s = 0;
            for (int j = 0; j < 32; ++j) {
                int jj = 32 * h + j;
                s += (((x[i].qs[jj / 4] >> (2 * (jj % 4))) & 3) - 1) * ab.qs[j];
            }
            sum += d * half_to_float(ab.d) * (float)s;
        }
    }
    return sum;
}

float dot_q2_k(int64_t n, const void* w, const void* act) {
    const BlockQ2_K* x = (const BlockQ2_K*)w;
    const BlockQ8_K* a = (const BlockQ8_K*)act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int sq = 0, sm = 0;
        for (int g = 0; g < 16; ++g) {
            int s = 0;
            for (int l = 0; l < 16; ++l) {
                int e = 16 * g + l;
                s += ((x[i].qs[(e / 128) * 32 + e % 32] >> (2 * ((e / 32) % 4))) & 3) * a[i].qs[e];
            }
            sq += (x[i].scales[g] & 0xF) * s;
            sm += (x[i].scales[g] >> 4) * a[i].bsums[g];
        }
        sum += a[i].d * half_to_float(x[i].d) * (float)sq - a[i].d * half_to_float(x[i].dmin) * (float)sm;
    }
    return sum;
}

float dot_q3_k(int64_t n, const void* w, const void* act) {
    const BlockQ3_K* x = (const BlockQ3_K*)w;
    const BlockQ8_K* a = (const BlockQ8_K*)act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int8_t sc[16];
        q3k_scales(x[i].scales, sc);
        int sq = 0;
        for (int g = 0; g < 16; ++g) {
            int s = 0;
            for (int l = 0; l < 16; ++l) {
                int e = 16 * g + l;
                int q = (x[i].qs[(e / 128) * 32 + e % 32] >> (2 * ((e / 32) % 4))) & 3;
                int hbit = (x[i].hmask[e % 32] >> (e / 32)) & 1;
                s += (q - (hbit ? 0 : 4)) * a[i].qs[e];
            }
            sq += sc[g] * s;
        }
        sum += a[i].d * half_to_float(x[i].d) * (float)sq;
    }
    return sum;
}

float dot_q4_k(int64_t n, const void* w, const void* act) {
    const BlockQ4_K* x = (const BlockQ4_K*)w;
    const BlockQ8_K* a = (const BlockQ8_K*)act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int sq = 0, sm = 0;
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            k4_scale_min(j, x[i].scales, sc, m);
            const uint8_t* q = x[i].qs + 32 * (j / 2);
            int s = 0;
            for (int l = 0; l < 32; ++l) s += ((q[l] >> (4 * (j % 2))) & 0xF) * a[i].qs[32 * j + l];
            sq += sc * s;
            sm += m * (a[i].bsums[2 * j] + a[i].bsums[2 * j + 1]);
        }
        sum += a[i].d * half_to_float(x[i].d) * (float)sq - a[i].d * half_to_float(x[i].dmin) * (float)sm;
    }
    return sum;
}

float dot_q5_k(int64_t n, const void* w, const void* act) {
    const BlockQ5_K* x = (const BlockQ5_K*)w;
    const BlockQ8_K* a = (const BlockQ8_K*)act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int sq = 0, sm = 0;
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            k4_scale_min(j, x[i].scales, sc, m);
            const uint8_t* q = x[i].qs + 32 * (j / 2);
            int s = 0;
            for (int l = 0; l < 32; ++l) {
                int v = ((q[l] >> (4 * (j % 2))) & 0xF) | (((x[i].qh[l] >> j) & 1) << 4);
                s += v * a[i].qs[32 * j + l];
            }
            sq += sc * s;
            sm += m * (a[i].bsums[2 * j] + a[i].bsums[2 * j + 1]);
        }
        sum += a[i].d * half_to_float(x[i].d) * (float)sq - a[i].d * half_to_float(x[i].dmin) * (float)sm;
    }
    return sum;
}

float dot_q6_k(int64_t n, const void* w, const void* act) {
    const BlockQ6_K* x = (const BlockQ6_K*)w;
    const BlockQ8_K* a = (const BlockQ8_K*)act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int sq = 0;
        for (int g = 0; g < 16; ++g) {
            int s = 0;
            for (int l16 = 0; l16 < 16; ++l16) {
                int e = 16 * g + l16, h = e / 128, r = (e % 128) / 32, l = e % 32;
                uint8_t qlb = x[i].ql[h * 64 + (r & 1) * 32 + l];
                int lo = (r < 2 ? qlb : qlb >> 4) & 0xF;
                int hi = (x[i].qh[h * 32 + l] >> (2 * r)) & 3;
                s += ((lo | (hi << 4)) - 32) * a[i].qs[e];
            }
            sq += x[i].scales[g] * s;
        }
        sum += a[i].d * half_to_float(x[i].d) * (float)sq;
    }
    return sum;
}

float dot_iq4_xs(int64_t n, const void* w, const void* act) {
    const BlockIQ4_XS* x = (const BlockIQ4_XS*)w;
    const BlockQ8_K* a = (const BlockQ8_K*)act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int sq = 0;
        for (int ib = 0; ib < 8; ++ib) {
            const uint8_t* q = x[i].qs + 16 * ib;
            const int8_t* y = a[i].qs + 32 * ib;
            int s = 0;
            for (int l = 0; l < 16; ++l)
                s += iq::kvalues_iq4nl[q[l] & 0xF] * y[l] + iq::kvalues_iq4nl[q[l] >> 4] * y[l + 16];
            sq += iq4xs_scale(x[i], ib) * s;
        }
        sum += a[i].d * half_to_float(x[i].d) * (float)sq;
    }
    return sum;
}

// sum over 8 weights of grid byte * sign * activation
inline int dot8(uint64_t grid, uint8_t signs, const int8_t* y) {
    int s = 0;
    for (int k = 0; k < 8; ++k) {
        int g = (int)((grid >> (8 * k)) & 0xFF);
        s += ((signs >> k) & 1 ? -g : g) * y[k];
    }
    return s;
}

inline int dot4(uint32_t grid, uint8_t signs, const int8_t* y) {
    int s = 0;
    for (int k = 0; k < 4; ++k) {
        int g = (int)((grid >> (8 * k)) & 0xFF);
        s += ((signs >> k) & 1 ? -g : g) * y[k];
    }
    return s;
}

float dot_iq2_xxs(int64_t n, const void* w, const void* act) {
    const BlockIQ2_XXS* x = (const BlockIQ2_XXS*)w;
    const BlockQ8_K* a = (const BlockQ8_K*)act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int sq = 0;
        for (int ib = 0; ib < 8; ++ib) {
            uint32_t idx = load_u32(x[i].qs + 4 * ib), aux = load_u32(x[i].qs + 4 * ib + 2);
            int s = 0;
            for (int g = 0; g < 4; ++g)
                s += dot8(iq::iq2xxs_grid[(idx >> (8 * g)) & 0xFF], iq::ksigns_iq2xs[(aux >> (7 * g)) & 127],
                          a[i].qs + 32 * ib + 8 * g);
            sq += (int)(2 * (aux >> 28) + 1) * s;
        }
        sum += a[i].d * half_to_float(x[i].d) * (float)sq;
    }
    return 0.125f * sum;
}

float dot_iq2_xs(int64_t n, const void* w, const void* act) {
    const BlockIQ2_XS* x = (const BlockIQ2_XS*)w;
    const BlockQ8_K* a = (const BlockQ8_K*)act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int sq = 0;
        for (int q = 0; q < 32; ++q) {
            int sc = (x[i].scales[q / 4] >> (4 * ((q / 2) % 2))) & 0xF;
            sq += (2 * sc + 1) * dot8(iq::iq2xs_grid[x[i].qs[q] & 511], iq::ksigns_iq2xs[x[i].qs[q] >> 9], a[i].qs + 8 * q);
        }
        sum += a[i].d * half_to_float(x[i].d) * (float)sq;
    }
    return 0.125f * sum;
}

float dot_iq2_s(int64_t n, const void* w, const void* act) {
    const BlockIQ2_S* x = (const BlockIQ2_S*)w;
    const BlockQ8_K* a = (const BlockQ8_K*)act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int sq = 0;
        for (int q = 0; q < 32; ++q) {
            int sc = (x[i].scales[q / 4] >> (4 * ((q / 2) % 2))) & 0xF;
            int idx = x[i].qs[q] | (((x[i].qh[q / 4] >> (2 * (q % 4))) & 3) << 8);
            sq += (2 * sc + 1) * dot8(iq::iq2s_grid[idx], x[i].signs[q], a[i].qs + 8 * q);
        }
        sum += a[i].d * half_to_float(x[i].d) * (float)sq;
    }
    return 0.125f * sum;
}

float dot_iq3_xxs(int64_t n, const void* w, const void* act) {
    const BlockIQ3_XXS* x = (const BlockIQ3_XXS*)w;
    const BlockQ8_K* a = (const BlockQ8_K*)act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int sq = 0;
        for (int ib = 0; ib < 8; ++ib) {
            uint32_t aux = load_u32(x[i].scales_signs + 4 * ib);
            int s = 0;
            for (int g = 0; g < 4; ++g) {
                uint8_t signs = iq::ksigns_iq2xs[(aux >> (7 * g)) & 127];
                const int8_t* y = a[i].qs + 32 * ib + 8 * g;
                s += dot4(iq::iq3xxs_grid[x[i].qs[8 * ib + 2 * g]], signs, y);
                s += dot4(iq::iq3xxs_grid[x[i].qs[8 * ib + 2 * g + 1]], signs >> 4, y + 4);
            }
            sq += (int)(2 * (aux >> 28) + 1) * s;
        }
        sum += a[i].d * half_to_float(x[i].d) * (float)sq;
    }
    return 0.25f * sum;
}

float dot_iq3_s(int64_t n, const void* w, const void* act) {
    const BlockIQ3_S* x = (const BlockIQ3_S*)w;
    const BlockQ8_K* a = (const BlockQ8_K*)act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int sq = 0;
        for (int q = 0; q < 32; ++q) {
            int sc = (x[i].scales[q / 8] >> (4 * ((q / 4) % 2))) & 0xF;
            int i0 = 2 * q, i1 = 2 * q + 1;
            int idx0 = x[i].qs[i0] | (((x[i].qh[i0 / 8] >> (i0 % 8)) & 1) << 8);
            int idx1 = x[i].qs[i1] | (((x[i].qh[i1 / 8] >> (i1 % 8)) & 1) << 8);
            int s = dot4(iq::iq3s_grid[idx0], x[i].signs[q], a[i].qs + 8 * q) +
                    dot4(iq::iq3s_grid[idx1], x[i].signs[q] >> 4, a[i].qs + 8 * q + 4);
            sq += (2 * sc + 1) * s;
        }
        sum += a[i].d * half_to_float(x[i].d) * (float)sq;
    }
    return sum;
}

}  // namespace

void fill_dots_scalar(DotTable& t) {
    auto set = [&](GgmlType ty, DotFn f) { t.dot[(int)ty] = f; };
    set(GgmlType::F32, dot_f32);         set(GgmlType::F16, dot_f16);       set(GgmlType::BF16, dot_bf16);
    set(GgmlType::Q8_0, dot_q8_0);       set(GgmlType::Q4_0, dot_q4_0);     set(GgmlType::Q5_0, dot_q5_0);
    set(GgmlType::IQ4_NL, dot_iq4_nl);   set(GgmlType::Q2_0, dot_q2_0);     set(GgmlType::Q4_1, dot_q4_1);
    set(GgmlType::Q5_1, dot_q5_1);
    set(GgmlType::Q2_K, dot_q2_k);       set(GgmlType::Q3_K, dot_q3_k);     set(GgmlType::Q4_K, dot_q4_k);
    set(GgmlType::Q5_K, dot_q5_k);       set(GgmlType::Q6_K, dot_q6_k);     set(GgmlType::IQ4_XS, dot_iq4_xs);
    set(GgmlType::IQ2_XXS, dot_iq2_xxs); set(GgmlType::IQ2_XS, dot_iq2_xs); set(GgmlType::IQ2_S, dot_iq2_s);
    set(GgmlType::IQ3_XXS, dot_iq3_xxs); set(GgmlType::IQ3_S, dot_iq3_s);
}

}  // namespace strata::qk
