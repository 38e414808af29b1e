// Runs on the host, no GPU needed: the CUDA decoders of every block format (kernels/quant_formats.cuh, compiled for
// the host) must equal the CPU reference dequantize_row bit for bit on random blocks.
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/kernels/quant_formats.cuh"
#include "random_blocks.h"

using namespace strata;

template <class F>
static int check_format(GgmlType t, std::mt19937& rng) {
    const int64_t n = 512, rows = 64;
    const std::vector<uint8_t> data = gputest::random_rows(t, rows, n, rng);
    const size_t row_bytes = ggml_row_bytes(t, n);
    int bad = 0;
    std::vector<float> ref(n), got(n);
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = data.data() + r * row_bytes;
        dequantize_row(t, row, ref.data(), n);
        for (int u = 0; u < n / 32; ++u) F::deq32(row + (size_t)(u / (F::QK / 32)) * F::BYTES, u % (F::QK / 32), got.data() + 32 * u);
        for (int64_t i = 0; i < n; ++i)
            if (std::memcmp(&ref[i], &got[i], 4) != 0) {
                if (bad < 5) std::fprintf(stderr, "%s row %lld elem %lld: cpu %.9g cuda %.9g\n", ggml_type_name(t),
                                          (long long)r, (long long)i, ref[i], got[i]);
                ++bad;
            }
    }
    std::printf("%-8s %s\n", ggml_type_name(t), bad ? "MISMATCH" : "ok");
    return bad ? 1 : 0;
}

int main() {
    using namespace strata::cuda;
    std::mt19937 rng(7);
    int failed = 0;
    failed += check_format<FmtQ8_0>(GgmlType::Q8_0, rng);
    failed += check_format<FmtQ4_0>(GgmlType::Q4_0, rng);
    failed += check_format<FmtQ5_0>(GgmlType::Q5_0, rng);
    failed += check_format<FmtQ4_1>(GgmlType::Q4_1, rng);
    failed += check_format<FmtQ5_1>(GgmlType::Q5_1, rng);
    failed += check_format<FmtIQ4_NL>(GgmlType::IQ4_NL, rng);
    failed += check_format<FmtQ2_0>(GgmlType::Q2_0, rng);
    failed += check_format<FmtQ2_K>(GgmlType::Q2_K, rng);
    failed += check_format<FmtQ3_K>(GgmlType::Q3_K, rng);
    failed += check_format<FmtQ4_K>(GgmlType::Q4_K, rng);
    failed += check_format<FmtQ5_K>(GgmlType::Q5_K, rng);
    failed += check_format<FmtQ6_K>(GgmlType::Q6_K, rng);
    failed += check_format<FmtIQ4_XS>(GgmlType::IQ4_XS, rng);
    failed += check_format<FmtIQ2_XXS>(GgmlType::IQ2_XXS, rng);
    failed += check_format<FmtIQ2_XS>(GgmlType::IQ2_XS, rng);
    failed += check_format<FmtIQ2_S>(GgmlType::IQ2_S, rng);
    failed += check_format<FmtIQ3_XXS>(GgmlType::IQ3_XXS, rng);
    failed += check_format<FmtIQ3_S>(GgmlType::IQ3_S, rng);
    std::printf("%s\n", failed ? "decode_host_test: FAILED" : "decode_host_test: all formats bit-identical");
    return failed ? 1 : 0;
}
