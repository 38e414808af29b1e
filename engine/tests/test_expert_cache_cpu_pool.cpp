// CpuExpertPool (the CPU half of the hybrid MoE path) against CpuBackend::moe_experts: per (token, expert) pair the
// outputs, combined in slot order, equal the CPU backend's bit for bit, with Q8 and with f32 activations, for any
// split of the pairs and any worker count.
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "check.h"
#include "experts/cpu_expert_pool.h"
#include "quant/quant.h"

using namespace strata;

namespace {

// A 3-D Q8_0 expert tensor {n, rows, E} with random blocks.
struct Q8Tensor {
    std::vector<uint8_t> bytes;
    Weight w;
    Q8Tensor(int n, int rows, int E, std::mt19937& rng) {
        const size_t row_bytes = (size_t)n / 32 * 34;
        bytes.resize(row_bytes * rows * E);
        std::uniform_int_distribution<int> q(-127, 127);
        std::uniform_real_distribution<float> d(0.001f, 0.02f);
        for (size_t b = 0; b < bytes.size() / 34; ++b) {
            const uint16_t h = f32_to_fp16(d(rng));
            std::memcpy(&bytes[b * 34], &h, 2);
            for (int i = 0; i < 32; ++i) bytes[b * 34 + 2 + i] = (uint8_t)(int8_t)q(rng);
        }
        w.type = GgmlType::Q8_0;
        w.ne[0] = n;
        w.ne[1] = rows;
        w.ne[2] = E;
        w.data = bytes.data();
        w.row_bytes = row_bytes;
    }
};

void check_mode(bool f32_act, int workers) {
    const int H = 64, I = 96, E = 6, T = 5, k = 3;
    std::mt19937 rng(7 + workers);
    Q8Tensor gate(H, I, E, rng), up(H, I, E, rng), down(I, H, E, rng);
    MoeWeights mw;
    mw.gate_exps = gate.w;
    mw.up_exps = up.w;
    mw.down_exps = down.w;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x((size_t)T * H);
    for (float& v : x) v = nd(rng);
    std::vector<int32_t> ids((size_t)T * k);
    std::vector<float> wts((size_t)T * k);
    for (int t = 0; t < T; ++t)
        for (int j = 0; j < k; ++j) {
            ids[t * k + j] = (t * 2 + j * 3) % E;   // distinct per token, experts shared between tokens
            wts[t * k + j] = 0.2f + 0.1f * j + 0.01f * t;
        }
    CpuBackend cpu(2, false, f32_act);
    std::vector<float> ref((size_t)T * H);
    cpu.moe_experts(mw, x.data(), T, k, ids.data(), wts.data(), ref.data());

    // Pairs computed in two groups (every other pair), as a cache split would, then combined in slot order.
    CpuExpertPool pool(workers, f32_act);
    std::vector<ExpertPair> even, odd;
    for (int p = 0; p < T * k; ++p) (p % 2 ? odd : even).push_back(ExpertPair{p / k, ids[p]});
    std::vector<float> out_even(even.size() * H), out_odd(odd.size() * H);
    pool.compute(gate.w, up.w, down.w, x.data(), even, out_even.data());
    pool.compute(gate.w, up.w, down.w, x.data(), odd, out_odd.data());
    CHECK(pool.pairs_done() == T * k);
    int mismatches = 0;
    for (int t = 0; t < T; ++t)
        for (int c = 0; c < H; ++c) {
            float acc = 0;
            for (int j = 0; j < k; ++j) {
                const int p = t * k + j;
                const float* row = p % 2 ? &out_odd[(size_t)(p / 2) * H] : &out_even[(size_t)(p / 2) * H];
                acc += wts[p] * row[c];
            }
            mismatches += acc != ref[(size_t)t * H + c];
        }
    CHECK_MSG(mismatches == 0, "f32_act %d, %d workers: %d of %d outputs differ", (int)f32_act, workers, mismatches,
              T * H);
    float mx = 0;
    for (float v : ref) mx = std::max(mx, std::abs(v));
    CHECK(mx > 0);   // the comparison saw real values
}

}  // namespace

int main() {
    for (bool f32_act : {false, true})
        for (int workers : {1, 3}) check_mode(f32_act, workers);
    return test::exit_code();
}
