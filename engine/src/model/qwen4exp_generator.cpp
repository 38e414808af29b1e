#include "model/qwen4exp_generator.h"

#include <algorithm>

#include "common/error.h"

namespace strata {

static int pick_context(const Hparams& hp, int n_ctx) {
    if (n_ctx > 0) return n_ctx;
    return std::min(hp.n_ctx_train, 32768);
}

Qwen4ExpGenerator::Qwen4ExpGenerator(Qwen4Exp& model, int n_ctx, int chunk)
    : model_(model), session_(model.backend(), model.hparams(), pick_context(model.hparams(), n_ctx)), chunk_(chunk) {
    STRATA_CHECK(chunk > 0, "chunk size must be positive, got ", chunk);
    logits_.resize(model.hparams().n_vocab);
}

const float* Qwen4ExpGenerator::append(std::span<const int32_t> tokens, const ProgressFn& progress,
                                       const CancelFn& cancel) {
    STRATA_CHECK(!tokens.empty(), "append needs at least one token");
    const int total = (int)tokens.size();
    for (int done = 0; done < total;) {
        const int T = std::min(chunk_, total - done);
        const bool last = done + T == total;
        model_.forward(session_, tokens.data() + done, T, last ? logits_.data() : nullptr);
        done += T;
        if (progress) progress(done, total);
        if (!last && cancel && cancel()) throw Cancelled{};
    }
    return logits_.data();
}

std::vector<std::pair<std::string, std::string>> Qwen4ExpGenerator::info() const {
    const Hparams& hp = model_.hparams();
    return {
        {"model", model_.file().paths()[0]},
        {"backend", model_.backend().name()},
        {"context", std::to_string(session_.n_ctx())},
        {"layers", std::to_string(hp.n_layer)},
        {"vocab", std::to_string(hp.n_vocab)},
        {"experts", std::to_string(hp.n_expert) + "x" + std::to_string(hp.n_expert_used)},
        {"chunk", std::to_string(chunk_)},
    };
}

}  // namespace strata
