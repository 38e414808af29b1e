#include "generate/grammar_constraint.h"

#include <algorithm>

#include "common/error.h"

namespace strata {

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> grammar, const Vocabulary& vocab,
                                     std::vector<int32_t> stop_ids, int32_t start_after)
    : matcher_(std::move(grammar)), vocab_(vocab), stop_ids_(std::move(stop_ids)), start_after_(start_after),
      active_(start_after < 0) {}

bool GrammarConstraint::is_stop(int32_t id) const {
    return std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end();
}

bool GrammarConstraint::may_allow(int32_t id) const {
    if (!active_) return true;
    if (id < 0 || static_cast<size_t>(id) >= vocab_.size()) return false;
    if (is_stop(id)) return matcher_.complete();
    return vocab_.is_text[id] && matcher_.first_bytes().has(static_cast<uint8_t>(vocab_.bytes[id][0]));
}

bool GrammarConstraint::allows(int32_t id) const {
    if (!may_allow(id)) return false;
    if (!active_ || is_stop(id)) return true;
    return matcher_.allows(vocab_.bytes[id]);
}

void GrammarConstraint::accept(int32_t id) {
    if (!active_) {
        active_ = id == start_after_;
        return;
    }
    if (is_stop(id)) return;
    if (id < 0 || static_cast<size_t>(id) >= vocab_.size() || !vocab_.is_text[id] || !matcher_.accept(vocab_.bytes[id]))
        fail("grammar: token ", id, " does not continue the text");
}

bool GrammarConstraint::advanced(std::span<const int32_t> after, std::unique_ptr<GrammarConstraint>& out) const {
    out = std::make_unique<GrammarConstraint>(*this);
    for (int32_t id : after) {
        if (!out->allows(id)) return false;
        out->accept(id);
    }
    return true;
}

int32_t GrammarConstraint::choose(const float* logits, int n_vocab, std::span<const int32_t> after) const {
    std::unique_ptr<GrammarConstraint> next;
    if (!advanced(after, next)) return -1;
    std::vector<Candidate> best, scratch;
    top_allowed(logits, n_vocab, {}, 1, *next, best, scratch);
    return best.empty() ? -1 : best[0].id;
}

}  // namespace strata
