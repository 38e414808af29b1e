// Random weights in any block format for the GPU tests: random bytes (every bit pattern of the quants is valid)
// with the fp16 scales overwritten by small positive values, so the decoded weights stay finite and O(0.1).
#pragma once
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gguf/ggml_types.h"
#include "quant/quant.h"

namespace gputest {

using strata::GgmlType;

struct ScaleFields {
    int offsets[2];   // byte offsets of fp16 scales within a block (-1: none)
};

inline ScaleFields scale_fields(GgmlType t) {
    switch (t) {
    case GgmlType::Q2_K: return {{80, 82}};
    case GgmlType::Q3_K: return {{108, -1}};
    case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q4_1: case GgmlType::Q5_1: return {{0, 2}};
    case GgmlType::Q6_K: return {{208, -1}};
    default: return {{0, -1}};
    }
}

// The block formats the engine decodes, plain types first.
inline std::vector<GgmlType> all_formats() {
    return {GgmlType::F32,    GgmlType::F16,    GgmlType::BF16,    GgmlType::Q8_0,   GgmlType::Q4_0,
            GgmlType::Q5_0,   GgmlType::Q4_1,   GgmlType::Q5_1,    GgmlType::IQ4_NL, GgmlType::Q2_0,
            GgmlType::Q2_K,   GgmlType::Q3_K,
            GgmlType::Q4_K,   GgmlType::Q5_K,   GgmlType::Q6_K,    GgmlType::IQ4_XS, GgmlType::IQ2_XXS,
            GgmlType::IQ2_XS, GgmlType::IQ2_S,  GgmlType::IQ3_XXS, GgmlType::IQ3_S};
}

// rows × n weights of type t (n a multiple of the block size), row-major, ggml row layout.
inline std::vector<uint8_t> random_rows(GgmlType t, int64_t rows, int64_t n, std::mt19937& rng) {
    const size_t row_bytes = strata::ggml_row_bytes(t, n);
    std::vector<uint8_t> out(row_bytes * (size_t)rows);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    if (t == GgmlType::F32) {
        for (size_t i = 0; i < out.size() / 4; ++i) {
            const float v = normal(rng);
            std::memcpy(out.data() + 4 * i, &v, 4);
        }
        return out;
    }
    if (t == GgmlType::F16 || t == GgmlType::BF16) {
        for (size_t i = 0; i < out.size() / 2; ++i) {
            const float v = normal(rng);
            uint16_t h;
            if (t == GgmlType::F16) {
                h = strata::f32_to_fp16(v);
            } else {
                uint32_t bits;
                std::memcpy(&bits, &v, 4);
                h = (uint16_t)(bits >> 16);
            }
            std::memcpy(out.data() + 2 * i, &h, 2);
        }
        return out;
    }
    std::uniform_int_distribution<int> byte(0, 255);
    for (uint8_t& b : out) b = (uint8_t)byte(rng);
    const strata::GgmlTypeInfo& info = strata::ggml_type_info(t);
    std::uniform_real_distribution<float> scale(0.002f, 0.02f);
    const ScaleFields f = scale_fields(t);
    for (size_t b = 0; b < out.size() / info.block_bytes; ++b)
        for (int off : f.offsets) {
            if (off < 0) continue;
            const uint16_t h = strata::f32_to_fp16(scale(rng));
            std::memcpy(out.data() + b * info.block_bytes + off, &h, 2);
        }
    return out;
}

}  // namespace gputest
