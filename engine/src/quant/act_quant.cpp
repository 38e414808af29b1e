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
            g[i].negsum[l] = -s;
            g[i].dscale[l] = half_to_float(ab[(l % 4) < 2 ? 0 : 1].d);
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
