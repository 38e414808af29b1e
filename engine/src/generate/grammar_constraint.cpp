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
    const int first = vocab_.first_byte[id];   // (a compact array: this runs over the whole vocabulary at times)
    return first >= 0 && matcher_.first_bytes().has(static_cast<uint8_t>(first));
}

bool GrammarConstraint::allows(int32_t id) const {
    if (!may_allow(id)) return false;
    if (!active_ || is_stop(id)) return true;
    return matcher_.allows(vocab_.bytes[id]);
}

bool GrammarConstraint::candidate_ids(std::vector<int32_t>& ids) const {
    // Worth it only where few first bytes may come (a JSON object's punctuation); else the caller scans every id.
    constexpr int kMaxListedBytes = 32;
    if (!active_) return false;
    int n = 0;
    for (int b = 0; b < 256; ++b) n += matcher_.first_bytes().has(static_cast<uint8_t>(b));
    if (n > kMaxListedBytes) return false;
    ids.clear();
    for (int b = 0; b < 256; ++b)
        if (matcher_.first_bytes().has(static_cast<uint8_t>(b)))
            ids.insert(ids.end(), vocab_.by_first_byte[b].begin(), vocab_.by_first_byte[b].end());
    if (matcher_.complete())
        for (int32_t id : stop_ids_)
            if (id >= 0 && (size_t)id < vocab_.size() &&   // (once: not already listed by its first byte)
                (vocab_.first_byte[id] < 0 || !matcher_.first_bytes().has((uint8_t)vocab_.first_byte[id])))
                ids.push_back(id);
    return true;
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
