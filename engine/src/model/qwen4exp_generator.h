// TextGenerator over the qwen4exp model and one Session: what serve/ and the CLI drive.
#pragma once
#include <memory>
#include <vector>

#include "generate/text_generator.h"
#include "model/qwen4exp.h"
#include "model/session.h"

namespace strata {

class Qwen4ExpGenerator : public TextGenerator {
public:
    // n_ctx 0 = min(trained context, 32768). chunk = tokens per prompt chunk.
    Qwen4ExpGenerator(Qwen4Exp& model, int n_ctx, int chunk = 256);

    int context_length() const override { return session_.n_ctx(); }
    int vocab_size() const override { return model_.hparams().n_vocab; }
    std::vector<int32_t> stop_ids() const override { return model_.hparams().stop_ids; }
    const std::vector<int32_t>& session_tokens() const override { return session_.tokens; }
    void reset_session() override { session_.reset(); }
    const float* append(std::span<const int32_t> tokens, const ProgressFn& progress, const CancelFn& cancel) override;
    int chunk_tokens() const override { return chunk_; }
    std::vector<std::pair<std::string, std::string>> info() const override;

private:
    Qwen4Exp& model_;
    Session session_;
    int chunk_;
    std::vector<float> logits_;
};

}  // namespace strata
