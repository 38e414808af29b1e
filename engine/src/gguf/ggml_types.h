// ggml tensor types as they appear in GGUF files: ids, names, block geometry. Facts of the file format only;
// the kernels that decode and multiply them live in quant/.
#pragma once
#include <cstddef>
#include <cstdint>

namespace strata {

enum class GgmlType : uint32_t {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
    Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
    IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
    I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
    TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41, Q2_0 = 42,
};

struct GgmlTypeInfo {
    GgmlType type;
    const char* name;
    int block_elems;   // weights per block (1 for plain types)
    int block_bytes;   // bytes per block
};

// nullptr for an id this table does not know (the reader turns that into a clear error).
const GgmlTypeInfo* ggml_type_info(uint32_t id);
const GgmlTypeInfo& ggml_type_info(GgmlType t);
const char* ggml_type_name(GgmlType t);

// Bytes of a row of n elements; n must be a multiple of the block size (checked by callers).
size_t ggml_row_bytes(GgmlType t, int64_t n);

}  // namespace strata
