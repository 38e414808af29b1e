// Benchmark (not a test): microseconds per quantize_act call on one 2560-wide activation row (the model's hidden
// size) for Q2_0 (Q8_0 blocks + Q2_0 groups), Q8_0 and Q4_K (Q8_K blocks), single thread. Prints JSON.
// Usage: act_quant_bench [--reps 200000]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>
#include "quant/quant.h"

using namespace strata;

int main(int argc, char** argv) {
    int reps = 200000;
    for (int i = 1; i + 1 < argc; i += 2)
        if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    constexpr int64_t n = 2560;
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(n);
    for (float& v : x) v = normal(rng);
    std::printf("{\"n\": %lld, \"reps\": %d, \"us_per_row\": {", (long long)n, reps);
    const GgmlType types[] = {GgmlType::Q2_0, GgmlType::Q8_0, GgmlType::Q4_K};
    for (int k = 0; k < 3; ++k) {
        std::vector<uint8_t> act(act_bytes(types[k], n));
        double best = 1e30;
        for (int pass = 0; pass < 5; ++pass) {  // best of 5 passes: the VM is shared
            auto t0 = std::chrono::steady_clock::now();
            for (int r = 0; r < reps / 5; ++r) {
                x[r % n] += 0.0f;  // keep the call inside the loop
                quantize_act(types[k], x.data(), act.data(), n);
            }
            double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
            best = std::min(best, us / (reps / 5));
        }
        std::printf("%s\"%s\": %.3f", k ? ", " : "", ggml_type_name(types[k]), best);
    }
    std::printf("}}\n");
    return 0;
}
