// A request's drafts and verdicts for speculative decoding (TextGenerator::DraftRule): drafts are the head's greedy
// token (under a grammar, its best allowed token); a draft stands when the request's own sampler would pick it —
// greedy: it is the choice; sampling: with the sampler's probability of it (the caller then draws the next token
// without a rejected draft), so the tokens follow the request's distribution exactly, with its penalties and grammar
// applied as if the drafts had been decoded one at a time.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "generate/grammar_constraint.h"
#include "generate/sampler.h"
#include "generate/text_generator.h"

namespace strata {

class RequestDraftRule : public TextGenerator::DraftRule {
public:
    // history: the tokens the penalties look at so far (prompt + generated; empty without penalties); the rule reads
    // it at each call, so the caller keeps it up to date. grammar may be null.
    RequestDraftRule(Sampler& sampler, const GrammarConstraint* grammar, const std::vector<int32_t>& history)
        : sampler_(sampler), grammar_(grammar), history_(history) {}

    int32_t draft(const float* logits, int n_vocab, std::span<const int32_t> after) const override;
    bool accepts(const float* logits, int n_vocab, std::span<const int32_t> after, int32_t draft) override;

private:
    Sampler& sampler_;
    const GrammarConstraint* grammar_;
    const std::vector<int32_t>& history_;
    std::vector<int32_t> scratch_;
};

}  // namespace strata
