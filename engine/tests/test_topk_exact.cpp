// topk_exact::topk (the standard-library-free copy a GPU kernel runs) against torch_topk_indices on inputs full of
// exact ties, both paths (heap: k·64 ≤ n, introselect: otherwise): same indices in the same order. Also the CPU
// backend's route_topk against the formula (softmax over all experts, top-k, renormalised).
#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "check.h"
#include "model/topk.h"
#include "model/topk_exact.h"

using namespace strata;

int main() {
    std::mt19937 rng(7);
    const int shapes[][2] = {{512, 10}, {512, 8}, {16, 2}, {16, 16}, {64, 1}, {128, 2}, {1000, 15}, {3, 2}, {4, 4},
                             {256, 4}, {257, 4}, {40, 7}};
    int cases = 0, mismatches = 0;
    for (const auto& s : shapes) {
        const int n = s[0], k = s[1];
        for (int it = 0; it < 400; ++it) {
            // it % 4: few distinct values (ties everywhere), many, continuous, all equal
            const int levels = it % 4 == 0 ? 3 : it % 4 == 1 ? 40 : it % 4 == 2 ? 0 : 1;
            std::vector<float> v(n);
            std::normal_distribution<float> nd;
            for (float& x : v) x = levels ? (float)(rng() % levels) - 1.0f : nd(rng);
            const std::vector<int32_t> want = torch_topk_indices(v.data(), n, k);
            std::vector<topk_exact::Elem> q(n);
            std::vector<int32_t> got(k);
            topk_exact::topk(v.data(), n, k, q.data(), got.data());
            ++cases;
            if (got != want) ++mismatches;
        }
    }
    CHECK_MSG(mismatches == 0, "%d of %d cases differ from torch_topk_indices", mismatches, cases);

    // route_topk on the CPU backend: ids as torch_topk_indices of the softmax, weights p / Σ_topk p.
    CpuBackend cpu(1);
    const int T = 3, E = 64, k = 6;
    std::vector<float> logits((size_t)T * E);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    for (float& x : logits) x = nd(rng);
    logits[5] = logits[9] = logits[20] = 4.5f;    // a tie inside token 0's top-k
    std::vector<int32_t> ids((size_t)T * k);
    std::vector<float> w((size_t)T * k);
    cpu.route_topk(logits.data(), T, E, k, ids.data(), w.data());
    for (int t = 0; t < T; ++t) {
        const float* l = logits.data() + (size_t)t * E;
        double mx = l[0], sum = 0;
        for (int e = 0; e < E; ++e) mx = std::max(mx, (double)l[e]);
        std::vector<double> p(E);
        for (int e = 0; e < E; ++e) sum += p[e] = std::exp(l[e] - mx);
        std::vector<float> pf(E);
        for (int e = 0; e < E; ++e) pf[e] = (float)(p[e] / sum);
        const std::vector<int32_t> want = torch_topk_indices(pf.data(), E, k);
        double top = 0;
        for (int j = 0; j < k; ++j) top += p[want[j]];
        for (int j = 0; j < k; ++j) {
            CHECK_MSG(ids[(size_t)t * k + j] == want[j], "token %d slot %d: id %d, want %d", t, j, ids[(size_t)t * k + j], want[j]);
            CHECK_MSG(std::fabs(w[(size_t)t * k + j] - p[want[j]] / top) < 1e-6, "token %d slot %d: weight %g, want %g", t,
                      j, w[(size_t)t * k + j], p[want[j]] / top);
        }
    }
    return test::exit_code();
}
