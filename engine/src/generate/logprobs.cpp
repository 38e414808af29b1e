#include "generate/logprobs.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "generate/sampler.h"

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
    if (top_n > 0) {   // the sampler's scan for the best candidates: value desc, ties to the lower id
        std::vector<Candidate> best;
        top_candidates(logits, n_vocab, {}, top_n, best);
        for (const Candidate& c : best) out.top.emplace_back(c.id, (float)(c.logit - log_z));
    }
    return out;
}

}  // namespace strata
