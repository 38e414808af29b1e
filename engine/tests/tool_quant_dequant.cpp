// Test helper (not a ctest test): dequantizes a file of raw blocks with the reference dequantizer.
// Usage: tool_quant_dequant <TYPE name, e.g. Q4_K> <in.bin> <out.f32>; writes little-endian f32.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>
#include "quant/quant.h"

using namespace strata;

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s <TYPE> <in.bin> <out.f32>\n", argv[0]);
        return 2;
    }
    const GgmlTypeInfo* info = nullptr;
    for (uint32_t id = 0; id < 64 && !info; ++id) {
        const GgmlTypeInfo* t = ggml_type_info(id);
        if (t && std::strcmp(t->name, argv[1]) == 0) info = t;
    }
    if (!info || !quant_supported(info->type)) {
        std::fprintf(stderr, "unsupported type '%s'\n", argv[1]);
        return 2;
    }
    std::ifstream in(argv[2], std::ios::binary);
    if (!in) {
        std::fprintf(stderr, "cannot read '%s'\n", argv[2]);
        return 2;
    }
    std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (raw.size() % (size_t)info->block_bytes != 0) {
        std::fprintf(stderr, "%s: %zu bytes is not a multiple of the %s block (%d bytes)\n", argv[2], raw.size(),
                     info->name, info->block_bytes);
        return 2;
    }
    int64_t n = (int64_t)(raw.size() / (size_t)info->block_bytes) * info->block_elems;
    std::vector<float> out((size_t)n);
    dequantize_row(info->type, raw.data(), out.data(), n);
    std::ofstream o(argv[3], std::ios::binary);
    o.write((const char*)out.data(), (std::streamsize)(out.size() * sizeof(float)));
    return o ? 0 : 1;
}
