// The tokens a grammar lets come next (docs/grammar.md): a token is allowed when its bytes keep the text a prefix of
// a sentence; a stop id only where the text is a whole sentence; control tokens never. With a trigger id the grammar
// starts after that token was generated (e.g. </think>): until then every token is allowed.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "generate/grammar.h"
#include "generate/sampler.h"
#include "generate/vocabulary.h"

namespace strata {

class GrammarConstraint : public TokenFilter {
public:
    GrammarConstraint(std::shared_ptr<const Grammar> grammar, const Vocabulary& vocab, std::vector<int32_t> stop_ids,
                      int32_t start_after = -1);

    bool active() const { return active_; }
    bool may_allow(int32_t id) const override;
    bool allows(int32_t id) const override;
    // The text tokens whose first byte may come next (and the stop ids where the text is complete), when at most 32
    // first bytes may.
    bool candidate_ids(std::vector<int32_t>& ids) const override;
    // The token was generated: the text moves on (a token the grammar does not allow is an error).
    void accept(int32_t id);
    // This constraint once the tokens `after` followed the ones accepted so far (false when one is not allowed).
    bool advanced(std::span<const int32_t> after, std::unique_ptr<GrammarConstraint>& out) const;
    // The best allowed token (greedy's choice) once `after` followed; −1 when none is allowed there.
    int32_t choose(const float* logits, int n_vocab, std::span<const int32_t> after) const;

private:
    bool is_stop(int32_t id) const;

    GrammarMatcher matcher_;
    const Vocabulary& vocab_;
    std::vector<int32_t> stop_ids_;
    int32_t start_after_;
    bool active_;
};

}  // namespace strata
