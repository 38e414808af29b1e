#include "generate/logprobs.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace strata {

TokenLogprobs token_logprobs(const float* logits, int n_vocab, int32_t chosen, int top_n) {
    STRATA_CHECK(n_vocab > 0 && chosen >= 0 && chosen < n_vocab, "token_logprobs: token ", chosen, " of ", n_vocab);
    STRATA_CHECK(top_n >= 0 && top_n <= kMaxTopLogprobs, "token_logprobs: ", top_n, " alternatives");
    const float mx = *std::max_element(logits, logits + n_vocab);
    double sum = 0;   // in double: 248K terms
    for (int v = 0; v < n_vocab; ++v) sum += std::exp((double)logits[v] - mx);
    const double log_z = mx + std::log(sum);
    TokenLogprobs out;
    out.logprob = (float)(logits[chosen] - log_z);
    if (top_n > 0) {
        // The n best (value desc, id asc) kept sorted in a small list: one pass over the row.
        std::vector<std::pair<int32_t, float>>& top = out.top;
        auto better = [](const std::pair<int32_t, float>& a, const std::pair<int32_t, float>& b) {
            return a.second > b.second || (a.second == b.second && a.first < b.first);
        };
        for (int v = 0; v < n_vocab; ++v) {
            const std::pair<int32_t, float> c{v, logits[v]};
            if ((int)top.size() == top_n && !better(c, top.back())) continue;
            top.insert(std::upper_bound(top.begin(), top.end(), c, better), c);
            if ((int)top.size() > top_n) top.pop_back();
        }
        for (auto& [id, lp] : top) lp = (float)(lp - log_z);
    }
    return out;
}

}  // namespace strata
