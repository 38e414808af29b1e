// Needs a GPU: the fused expert gate/up/swiglu kernel (cuda::moe_gate_up) against matmul(gate), matmul(up) and the
// swiglu formula on random experts, for several formats, 1, 4 and 8 tokens × top-3 of 8 experts (8 tokens: more
// than 16 pairs, so pairs sharing an expert are grouped), and the refusal of f32 activations.
// usage: moe_gate_up_test
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/kernels/moe_gate_up.h"
#include "random_blocks.h"
#include "gpu_test_util.h"

using namespace strata;

namespace {

using gputest::to_device;
using gputest::to_host;

// One format and token count; returns max |fused − reference| / max |reference|.
double check(GgmlType t, int T, std::mt19937& rng) {
    const int H = 512, I = 100, E = 8, k = 3, P = T * k;
    const size_t row_bytes = ggml_row_bytes(t, H);
    uint8_t* wg = to_device(gputest::random_rows(t, (int64_t)E * I, H, rng));
    uint8_t* wu = to_device(gputest::random_rows(t, (int64_t)E * I, H, rng));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x((size_t)T * H);
    for (float& v : x) v = normal(rng);
    std::vector<int32_t> ids;
    for (int tt = 0; tt < T; ++tt) {
        std::vector<int32_t> perm(E);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        ids.insert(ids.end(), perm.begin(), perm.begin() + k);
    }
    float* dx = to_device(x);
    int32_t* dids = to_device(ids);
    const int blk = cuda::act_block(t);
    std::vector<int8_t> zq((size_t)T * H);
    std::vector<float> zd((size_t)T * H / blk);
    cuda::ActQ8 act{to_device(zq), to_device(zd)};
    float *g = nullptr, *u = nullptr, *h = nullptr;
    CUDA_CHECK(cudaMalloc(&g, (size_t)P * I * 4));
    CUDA_CHECK(cudaMalloc(&u, (size_t)P * I * 4));
    CUDA_CHECK(cudaMalloc(&h, (size_t)P * I * 4));
    cuda::MatmulArgs mg;
    mg.type = t;
    mg.w = wg;
    mg.row_bytes = row_bytes;
    mg.rows = I;
    mg.n = H;
    mg.mat_stride = row_bytes * I;
    mg.ids = dids;
    mg.act_div = k;
    cuda::MatmulArgs mu = mg;
    mu.w = wu;
    cudaStream_t s = 0;
    cuda::quantize_act(s, blk, dx, T, H, act);
    cuda::matmul(s, mg, dx, act, P, g);
    cuda::matmul(s, mu, dx, act, P, u);
    if (!cuda::moe_gate_up(s, mg, mu, act, P, h)) {
        std::printf("%s T=%d: moe_gate_up refused a block format\n", ggml_type_name(t), T);
        return INFINITY;
    }
    const bool refused = !cuda::moe_gate_up(s, mg, mu, cuda::ActQ8{}, P, h);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> gh = to_host(g, (size_t)P * I), uh = to_host(u, (size_t)P * I), hh = to_host(h, (size_t)P * I);
    double num = 0, den = 0;
    for (size_t i = 0; i < hh.size(); ++i) {
        const float want = gh[i] / (1.0f + std::exp(-gh[i])) * uh[i];
        const double d = std::fabs((double)hh[i] - want);
        num = std::isnan(d) ? INFINITY : std::max(num, d);
        den = std::max(den, (double)std::fabs(want));
    }
    for (void* p : {(void*)wg, (void*)wu, (void*)dx, (void*)dids, (void*)act.q, (void*)act.d, (void*)g, (void*)u, (void*)h})
        cudaFree(p);
    return refused ? num / std::max(den, 1e-30) : INFINITY;
}

}  // namespace

int main() {
    std::mt19937 rng(5);
    int failed = 0;
    try {
        cuda::upload_iq_tables();
        for (GgmlType t : {GgmlType::Q2_0, GgmlType::IQ2_XS, GgmlType::IQ3_XXS, GgmlType::IQ4_NL, GgmlType::Q4_K,
                           GgmlType::Q6_K, GgmlType::Q8_0})
            for (int T : {1, 4, 8}) {
                const double rel = check(t, T, rng);
                const bool ok = rel <= 1e-5;   // the same dots as matmul; host expf vs device expf
                std::printf("moe_gate_up %-8s T=%d rel %.3e  %s\n", ggml_type_name(t), T, rel, ok ? "ok" : "FAIL");
                failed += !ok;
            }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "moe_gate_up_test: error: %s\n", e.what());
        return 2;
    }
    std::printf("moe_gate_up_test: %s\n", failed ? "FAILED" : "all ok");
    return failed ? 1 : 0;
}
