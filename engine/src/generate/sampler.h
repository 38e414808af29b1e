// Token choice from a logits row: greedy by default; temperature / top-k (<= 64) / min-p / top-p sampling and
// repeat / frequency / presence penalties over a window of recent tokens; seeded, so the same seed gives the same tokens.
#pragma once
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "common/argmax.h"   // argmax_first: the greedy choice

namespace strata {

inline constexpr int kMaxTopK = 64;  // sampling never looks past the 64 most likely tokens

struct SamplingParams {
    double temperature = 0.0;       // 0 = greedy
    int top_k = 0;                  // 0..64; 0 means 64
    double top_p = 1.0;             // (0, 1]
    double min_p = 0.0;             // [0, 1]
    double repeat_penalty = 1.0;    // > 0; 1 = off
    double frequency_penalty = 0.0; // [-2, 2]
    double presence_penalty = 0.0;  // [-2, 2]
    int penalty_window = 64;        // last n tokens of prompt + generated
    std::optional<uint64_t> seed;   // absent: a random seed

    bool greedy() const { return temperature <= 0.0; }
    bool has_penalties() const {
        return repeat_penalty != 1.0 || frequency_penalty != 0.0 || presence_penalty != 0.0;
    }
};

struct Candidate {
    int32_t id;
    float logit;  // after penalties
};

class Sampler {
public:
    explicit Sampler(const SamplingParams& params);

    // Picks the next token. history: every token before it (prompt + generated so far); only the last
    // penalty_window of them matter.
    int32_t sample(const float* logits, int n_vocab, std::span<const int32_t> history);

    const SamplingParams& params() const { return params_; }
    uint64_t seed() const { return seed_; }

private:
    SamplingParams params_;
    uint64_t seed_;
    std::mt19937_64 rng_;  // fully specified by the standard, so draws are the same on every platform
    std::vector<Candidate> penalised_;  // scratch: tokens of the window with their penalised logits
    std::vector<Candidate> top_;        // scratch: the best candidates, best first
    std::vector<double> probs_;         // scratch
};

// The k best candidates (highest logit first, ties to the lower id) of the logits row with the penalised
// values replacing the raw ones. Exposed for tests.
void top_candidates(const float* logits, int n_vocab, std::span<const Candidate> penalised, int k,
                    std::vector<Candidate>& out);

// Penalised logits of the distinct tokens in the last `window` tokens of history (sorted by id).
void penalise_window(const float* logits, int n_vocab, std::span<const int32_t> history,
                     const SamplingParams& params, std::vector<Candidate>& out);

}  // namespace strata
