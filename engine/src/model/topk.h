// Top-k selection that reproduces torch.topk on the CPU (ATen's topk_impl_loop, largest=True) including how it
// breaks ties: with relu'd indexer scores, exact ties (0.0) are common, and transformers' choice among tied blocks
// decides which keys a query sees. For k·64 ≤ n ATen keeps a heap of k and admits only strictly larger values
// (the earliest index wins a tie); otherwise it runs std::nth_element on (value, index) pairs.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace strata {

// Indices of the k largest of v[0..n) (in no particular order), as torch.topk picks them.
inline std::vector<int32_t> torch_topk_indices(const float* v, int n, int k) {
    using elem_t = std::pair<double, int64_t>;
    auto greater = [](const elem_t& a, const elem_t& b) { return a.first > b.first; };
    std::vector<int32_t> out;
    if (k <= 0) return out;
    if ((int64_t)k * 64 <= n) {
        std::vector<elem_t> heap;
        for (int j = 0; j < k; ++j) heap.push_back({v[j], j});
        std::make_heap(heap.begin(), heap.end(), greater);
        for (int j = k; j < n; ++j) {
            if (greater({v[j], j}, heap.front())) {
                std::pop_heap(heap.begin(), heap.end(), greater);
                heap.back() = {v[j], j};
                std::push_heap(heap.begin(), heap.end(), greater);
            }
        }
        for (const elem_t& e : heap) out.push_back((int32_t)e.second);
    } else {
        std::vector<elem_t> q(n);
        for (int j = 0; j < n; ++j) q[j] = {v[j], j};
        std::nth_element(q.begin(), q.begin() + k - 1, q.end(), greater);
        for (int j = 0; j < k; ++j) out.push_back((int32_t)q[j].second);
    }
    return out;
}

}  // namespace strata
