// Log-probabilities of a logits row for the serve protocol's `logprobs=N` (protocol.md §3): the model's own
// distribution, log_softmax of the raw logits, before penalties, temperature and top-k/p.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace strata {

inline constexpr int kMaxTopLogprobs = 20;

struct TokenLogprobs {
    float logprob = 0;                                // of the chosen token
    std::vector<std::pair<int32_t, float>> top;       // the n most likely tokens, best first (ties: lower id first)
};

// logits [n_vocab]; chosen: the token the sampler picked; top_n: 0..kMaxTopLogprobs alternatives.
TokenLogprobs token_logprobs(const float* logits, int n_vocab, int32_t chosen, int top_n);

}  // namespace strata
