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

// A rule the chosen token must satisfy (a grammar): only allowed tokens are candidates, as if every other logit were
// −∞. may_allow is a cheap test that allows implies; allows is the exact one.
class TokenFilter {
public:
    virtual ~TokenFilter() = default;
    virtual bool may_allow(int32_t id) const = 0;
    virtual bool allows(int32_t id) const = 0;
    // The ids it may allow (each once, in any order), when it can list them cheaply (into ids; true); false: any id
    // may be.
    virtual bool candidate_ids(std::vector<int32_t>& ids) const { return false; }
};

class Sampler {
public:
    explicit Sampler(const SamplingParams& params);

    // Picks the next token. history: every token before it (prompt + generated so far); only the last
    // penalty_window of them matter. With a filter, only tokens it allows are candidates (top_k of those); throws
    // strata::Error when it allows none.
    // exclude: a token left out of the draw (a rejected speculative draft), −1 none.
    int32_t sample(const float* logits, int n_vocab, std::span<const int32_t> history,
                   const TokenFilter* filter = nullptr, int32_t exclude = -1);
    // Speculative sampling with a single proposed token: whether a draft stands, drawn with the probability sample()
    // would give it (greedy: whether it is the greedy choice, no draw). A rejected draft is then excluded from the
    // next sample() of the same row: accepted with p(d), else drawn from p without d, the token follows p exactly.
    bool accepts(const float* logits, int n_vocab, std::span<const int32_t> history, const TokenFilter* filter,
                 int32_t draft);

    const SamplingParams& params() const { return params_; }
    uint64_t seed() const { return seed_; }

private:
    // top_ (best first) for a row; when sampling also probs_ (softmax with temperature) and keep_, how many of them
    // min-p and top-p leave.
    void prepare(const float* logits, int n_vocab, std::span<const int32_t> history, const TokenFilter* filter);

    SamplingParams params_;
    size_t keep_ = 1;
    uint64_t seed_;
    std::mt19937_64 rng_;  // fully specified by the standard, so draws are the same on every platform
    std::vector<Candidate> penalised_;  // scratch: tokens of the window with their penalised logits
    std::vector<Candidate> top_;        // scratch: the best candidates, best first
    std::vector<Candidate> scan_;       // scratch: candidates before the filter
    std::vector<double> probs_;         // scratch
};

// The k best candidates (highest logit first, ties to the lower id) of the logits row with the penalised
// values replacing the raw ones. Exposed for tests.
void top_candidates(const float* logits, int n_vocab, std::span<const Candidate> penalised, int k,
                    std::vector<Candidate>& out);

// The k best candidates the filter allows (best first): the best 64 are tried first; when fewer than k of them are
// allowed, every token the filter may allow, in order. Empty when it allows none. Exposed for tests.
void top_allowed(const float* logits, int n_vocab, std::span<const Candidate> penalised, int k,
                 const TokenFilter& filter, std::vector<Candidate>& out, std::vector<Candidate>& scratch);

// Penalised logits of the distinct tokens in the last `window` tokens of history (sorted by id).
void penalise_window(const float* logits, int n_vocab, std::span<const int32_t> history,
                     const SamplingParams& params, std::vector<Candidate>& out);

}  // namespace strata
