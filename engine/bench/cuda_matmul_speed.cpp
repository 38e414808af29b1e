// Decode-speed check of the CUDA matmul: one 4096-wide weight matrix of about 512 MB per format (far beyond L2),
// times CudaBackend::matmul (activation quantization included) at T = 1 and T = 8 and reports weight GB/s.
// usage: cuda_matmul_speed [results.json]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "../../tests/gpu/random_blocks.h"

using namespace strata;

int main(int argc, char** argv) {
    const int n = 4096, block_rows = 4096, iters = 20;
    const size_t target_bytes = (size_t)512 << 20;
    std::mt19937 rng(1);
    std::string json = "{\"bench\": \"cuda_matmul_speed\", \"n\": 4096, \"results\": [\n";
    const GgmlType types[] = {GgmlType::IQ2_XS, GgmlType::Q2_0,   GgmlType::IQ3_XXS, GgmlType::IQ4_NL, GgmlType::Q4_K,
                              GgmlType::Q6_K,   GgmlType::Q8_0,   GgmlType::BF16,    GgmlType::F16};
    bool first = true;
    try {
        for (GgmlType t : types) {
            CudaBackend be(0);    // a fresh backend per format frees the previous matrix
            if (first) std::printf("device: %s\n", be.device_name().c_str());
            const size_t row_bytes = ggml_row_bytes(t, n);
            const int64_t rows = (int64_t)(target_bytes / row_bytes) / block_rows * block_rows;
            const std::vector<uint8_t> block = gputest::random_rows(t, block_rows, n, rng);
            std::vector<uint8_t> data(row_bytes * (size_t)rows);
            for (int64_t r = 0; r < rows; r += block_rows) std::memcpy(data.data() + r * row_bytes, block.data(), block.size());
            GgufTensor tensor;
            tensor.name = std::string("bench.") + ggml_type_name(t);
            tensor.type = t;
            Weight w;
            w.tensor = &tensor;
            w.type = t;
            w.ne[0] = n;
            w.ne[1] = rows;
            w.data = data.data();
            w.row_bytes = row_bytes;
            be.upload_weight(w);

            std::normal_distribution<float> normal(0.0f, 1.0f);
            std::vector<float> x((size_t)8 * n);
            for (float& v : x) v = normal(rng);
            float* dx = be.alloc(x.size());
            float* dy = be.alloc((size_t)8 * rows);
            be.to_device(dx, x.data(), x.size());
            for (int T : {1, 8}) {
                for (int i = 0; i < 3; ++i) be.matmul(w, dx, T, dy);
                be.synchronize();
                const auto t0 = std::chrono::steady_clock::now();
                for (int i = 0; i < iters; ++i) be.matmul(w, dx, T, dy);
                be.synchronize();
                const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
                const double gbs = (double)data.size() / s / 1e9;
                std::printf("%-8s T=%d  %lld x %d  %7.1f MB  %8.1f us  %7.1f GB/s\n", ggml_type_name(t), T,
                            (long long)rows, n, data.size() / 1e6, s * 1e6, gbs);
                char line[256];
                std::snprintf(line, sizeof line,
                              "%s  {\"type\": \"%s\", \"T\": %d, \"rows\": %lld, \"bytes\": %zu, \"us\": %.2f, \"GBps\": %.1f}",
                              first ? "" : ",\n", ggml_type_name(t), T, (long long)rows, data.size(), s * 1e6, gbs);
                json += line;
                first = false;
            }
            be.release(dx);
            be.release(dy);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "cuda_matmul_speed: error: %s\n", e.what());
        return 2;
    }
    json += "\n]}\n";
    if (argc > 1) {
        std::FILE* f = std::fopen(argv[1], "w");
        if (f) {
            std::fputs(json.c_str(), f);
            std::fclose(f);
        }
    }
    return 0;
}
