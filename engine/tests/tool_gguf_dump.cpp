// tool_gguf_dump FILE TENSOR OUT: writes the tensor, dequantized to f32 in ggml order, as raw float32 (for tests
// that compare our reader with the converter's input). Prints the shape and type on stdout.
#include <cstdio>
#include <vector>

#include "common/error.h"
#include "gguf/gguf_file.h"
#include "quant/quant.h"

int main(int argc, char** argv) {
    if (argc != 4) { std::fprintf(stderr, "usage: tool_gguf_dump FILE TENSOR OUT.f32\n"); return 2; }
    try {
        auto f = strata::GgufFile::open(argv[1]);
        const strata::GgufTensor& t = f->tensor(argv[2]);
        const uint8_t* data = f->map_tensor(t);
        const int64_t rows = t.ne[1] * t.ne[2] * t.ne[3];
        const size_t row_bytes = strata::ggml_row_bytes(t.type, t.ne[0]);
        std::vector<float> row(t.ne[0]);
        std::FILE* out = std::fopen(argv[3], "wb");
        if (!out) strata::fail("cannot write ", argv[3]);
        for (int64_t r = 0; r < rows; ++r) {
            strata::dequantize_row(t.type, data + r * row_bytes, row.data(), t.ne[0]);
            std::fwrite(row.data(), sizeof(float), row.size(), out);
        }
        std::fclose(out);
        std::printf("%s %s %s\n", t.name.c_str(), strata::ggml_type_name(t.type), t.shape_string().c_str());
        return 0;
    } catch (const strata::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
