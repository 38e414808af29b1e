#include "generate/draft_rule.h"

#include <memory>

#include "common/argmax.h"

namespace strata {

int32_t RequestDraftRule::draft(const float* logits, int n_vocab, std::span<const int32_t> after) const {
    return grammar_ ? grammar_->choose(logits, n_vocab, after) : argmax_first(logits, n_vocab);
}

bool RequestDraftRule::accepts(const float* logits, int n_vocab, std::span<const int32_t> after, int32_t draft) {
    std::unique_ptr<GrammarConstraint> g;
    if (grammar_ && !grammar_->advanced(after, g)) return false;
    std::span<const int32_t> history = history_;
    if (sampler_.params().has_penalties() && !after.empty()) {
        scratch_.assign(history_.begin(), history_.end());
        scratch_.insert(scratch_.end(), after.begin(), after.end());
        history = scratch_;
    }
    return sampler_.accepts(logits, n_vocab, history, g && g->active() ? g.get() : nullptr, draft);
}

}  // namespace strata
