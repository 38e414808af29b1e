// The hybrid path's staged-miss plans: split, batches, tiles (see staged_misses.h).
#include "experts/staged_misses.h"

#include <algorithm>

#include "common/error.h"

namespace strata {

StagedSplit staged_split(const std::vector<ExpertPair>& grouped, bool all, double share) {
    const int n = (int)grouped.size();
    int distinct = 0;
    for (int i = 0; i < n; ++i) distinct += i == 0 || grouped[i].expert != grouped[i - 1].expert;
    if (all) return StagedSplit{n, distinct};
    STRATA_CHECK(share >= 0 && share <= 1, "staged misses: share ", share, " is outside 0..1");
    const int want = std::min(distinct, (int)(share * distinct + 0.5));
    StagedSplit s;
    for (; s.pairs < n; ++s.pairs) {
        const bool first = s.pairs == 0 || grouped[s.pairs].expert != grouped[s.pairs - 1].expert;
        if (first && s.experts == want) break;
        s.experts += first;
    }
    return s;
}

std::vector<StageBatch> stage_batches(const std::vector<ExpertPair>& grouped, int n, int slots_per_batch,
                                      std::vector<int32_t>& slot) {
    STRATA_CHECK(slots_per_batch > 0 && n >= 0 && n <= (int)grouped.size(), "staged misses: ", n, " pairs of ",
                 grouped.size(), " in batches of ", slots_per_batch);
    std::vector<StageBatch> batches;
    slot.assign((size_t)n, 0);
    for (int i = 0, d = -1; i < n; ++i) {
        const bool first = i == 0 || grouped[i].expert != grouped[i - 1].expert;
        d += first;
        if (first && d % slots_per_batch == 0) batches.push_back(StageBatch{(size_t)i, (size_t)i, 0});
        batches.back().end = (size_t)i + 1;
        batches.back().experts += first;
        slot[i] = d % slots_per_batch;
    }
    return batches;
}

int append_pair_tiles(const int32_t* group, size_t begin, size_t end, int max_pairs, std::vector<int32_t>& words) {
    int n = 0;
    for (size_t i = begin; i < end;) {
        size_t j = i + 1;
        while (j < end && group[j] == group[i] && j - i < (size_t)max_pairs) ++j;
        words.insert(words.end(), {group[i], (int32_t)(i - begin), (int32_t)(j - i), 0});
        ++n;
        i = j;
    }
    return n;
}

}  // namespace strata
