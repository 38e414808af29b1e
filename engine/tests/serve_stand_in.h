// A model stand-in for tests of the serve loop's reporting: 64 ids, chunks of 8, the answer is always token 5 (never
// the stop id 63). Each append calls on_append(number of tokens appended), where a test moves its counters.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "generate/text_generator.h"

namespace test {

class ServeStandIn : public strata::TextGenerator {
public:
    explicit ServeStandIn(std::function<void(int64_t)> on_append) : on_append_(std::move(on_append)) {}
    int context_length() const override { return 256; }
    int vocab_size() const override { return 64; }
    std::vector<int32_t> stop_ids() const override { return {63}; }
    const std::vector<int32_t>& session_tokens() const override { return tokens_; }
    void reset_session() override { tokens_.clear(); }
    int chunk_tokens() const override { return 8; }
    std::vector<std::pair<std::string, std::string>> info() const override { return {{"backend", "stand in"}}; }
    const float* append(std::span<const int32_t> tokens, const ProgressFn& progress, const CancelFn&) override {
        tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
        on_append_((int64_t)tokens.size());
        if (progress) progress((int)tokens.size(), (int)tokens.size());
        logits_.assign(64, 0.0f);
        logits_[5] = 1.0f;
        return logits_.data();
    }

private:
    std::function<void(int64_t)> on_append_;
    std::vector<int32_t> tokens_;
    std::vector<float> logits_;
};

}  // namespace test
