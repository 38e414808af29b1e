// lookup_drafts (generate/prompt_lookup.h): the longest n-gram first, its most recent earlier occurrence, at most n
// tokens, never past a stop id, nothing without a match.
#include <vector>

#include "check.h"
#include "generate/prompt_lookup.h"

using strata::lookup_drafts;

namespace {
std::vector<int32_t> drafts(const std::vector<int32_t>& ctx, int n, std::vector<int32_t> stops = {}) {
    return lookup_drafts(ctx, n, stops);
}
}  // namespace

int main() {
    // "... 7 8 9 10 11 ... 7 8 9" → 10 11 (the 3-gram 7 8 9 occurred before).
    CHECK((drafts({1, 7, 8, 9, 10, 11, 2, 3, 7, 8, 9}, 4) == std::vector<int32_t>{10, 11, 2, 3}));
    CHECK((drafts({1, 7, 8, 9, 10, 11, 2, 3, 7, 8, 9}, 2) == std::vector<int32_t>{10, 11}));
    // The most recent occurrence wins: 5 6 → 20 (the later one), not 10.
    CHECK((drafts({5, 6, 10, 0, 5, 6, 20, 0, 5, 6}, 1) == std::vector<int32_t>{20}));
    // A longer n-gram beats a more recent shorter one: 3 4 5 matched at the start (→ 6), though 4 5 is later (→ 9).
    CHECK((drafts({3, 4, 5, 6, 1, 4, 5, 9, 2, 3, 4, 5}, 1) == std::vector<int32_t>{6}));
    // No earlier bigram: nothing (a unigram match is not enough by default).
    CHECK(drafts({1, 2, 3, 4, 5, 1}, 4).empty());
    CHECK(drafts({}, 4).empty() && drafts({1, 2}, 4).empty() && drafts({1, 2, 1, 2}, 0).empty());
    // A stop id ends the draft before it; a draft that would start with one is empty.
    CHECK((drafts({1, 2, 3, 99, 4, 1, 2}, 4, {99}) == std::vector<int32_t>{3}));
    CHECK(drafts({1, 2, 99, 4, 1, 2}, 4, {99}).empty());
    // Repeats: 1 2 1 2 1 2 → the occurrence overlapping the suffix continues the pattern.
    CHECK((drafts({1, 2, 1, 2, 1, 2}, 3) == std::vector<int32_t>{1, 2}));
    return test::exit_code();
}
