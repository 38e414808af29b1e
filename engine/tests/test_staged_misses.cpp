// The hybrid path's staged-miss plans (experts/staged_misses.h): the PCIe share's split, staging batches and the
// tiles of grouped pairs cover every pair once, in order, within their limits.
#include <cstdio>
#include <vector>

#include "check.h"
#include "experts/staged_misses.h"

using namespace strata;

namespace {
// Pairs grouped by expert: expert e (of `experts`, ids step 3) serves 1 + (e * 7 % count_mod) tokens.
std::vector<ExpertPair> grouped_pairs(int experts, int count_mod) {
    std::vector<ExpertPair> v;
    for (int e = 0; e < experts; ++e)
        for (int t = 0; t < 1 + e * 7 % count_mod; ++t) v.push_back(ExpertPair{t, 3 * e});
    return v;
}
}  // namespace

int main() {
    // Split: all, none, a share rounded to whole experts, never a part of an expert's pairs.
    const std::vector<ExpertPair> g = grouped_pairs(10, 5);
    CHECK(staged_split(g, true, 0).pairs == (int)g.size() && staged_split(g, true, 0).experts == 10);
    CHECK(staged_split(g, false, 0).pairs == 0 && staged_split(g, false, 0).experts == 0);
    CHECK(staged_split(g, false, 1).pairs == (int)g.size());
    for (double share : {0.1, 0.25, 0.5, 0.75, 0.99}) {
        const StagedSplit s = staged_split(g, false, share);
        CHECK_MSG(s.experts == (int)(share * 10 + 0.5), "share %g: %d experts", share, s.experts);
        CHECK(s.pairs == (int)g.size() || g[s.pairs].expert != g[s.pairs - 1].expert);
        int distinct = 0;
        for (int i = 0; i < s.pairs; ++i) distinct += i == 0 || g[i].expert != g[i - 1].expert;
        CHECK(distinct == s.experts);
    }
    // Decode shape: 4 misses of one token each, share 0.75 -> 3 staged.
    const std::vector<ExpertPair> d = {{0, 5}, {0, 9}, {0, 200}, {0, 301}};
    CHECK(staged_split(d, false, 0.75).pairs == 3);

    // Batches: at most S experts each, consecutive, slots 0..S-1 per batch in expert order.
    const std::vector<ExpertPair> big = grouped_pairs(150, 9);
    for (int S : {1, 4, 64, 200}) {
        std::vector<int32_t> slot;
        const std::vector<StageBatch> b = stage_batches(big, (int)big.size(), S, slot);
        CHECK((int)b.size() == (150 + S - 1) / S);
        size_t next = 0;
        for (const StageBatch& x : b) {
            CHECK(x.begin == next && x.end > x.begin && x.experts <= S && x.experts >= 1);
            for (size_t i = x.begin; i < x.end; ++i) {
                const bool first = i == x.begin || big[i].expert != big[i - 1].expert;
                CHECK(slot[i] >= 0 && slot[i] < x.experts);
                if (i > x.begin) CHECK(slot[i] == slot[i - 1] + (first ? 1 : 0));
                else CHECK(slot[i] == 0);
            }
            next = x.end;
        }
        CHECK(next == big.size());
    }

    // Tiles: each one group, <= 32 pairs, first relative to begin, covering [begin, end) once in order.
    std::vector<int32_t> group;
    for (const ExpertPair& p : big) group.push_back(p.expert);
    for (size_t begin : {(size_t)0, (size_t)17}) {
        std::vector<int32_t> words = {-1, -1};   // tiles are appended after what is there
        const int n = append_pair_tiles(group.data(), begin, group.size(), 32, words);
        CHECK((int)words.size() == 2 + 4 * n);
        size_t covered = begin;
        for (int t = 0; t < n; ++t) {
            const int32_t* it = &words[2 + 4 * t];
            CHECK(it[1] == (int32_t)(covered - begin) && it[2] >= 1 && it[2] <= 32 && it[3] == 0);
            for (int i = 0; i < it[2]; ++i) CHECK(group[covered + i] == it[0]);
            covered += it[2];
        }
        CHECK(covered == group.size());
    }
    // A group longer than a tile is split into tiles of 32, 32, 6.
    std::vector<int32_t> long_group(70, 5), tiles;
    long_group.insert(long_group.end(), {6, 6, 6});
    CHECK(append_pair_tiles(long_group.data(), 0, long_group.size(), 32, tiles) == 4);
    CHECK(tiles.size() == 16 && tiles[2] == 32 && tiles[6] == 32 && tiles[9] == 64 && tiles[10] == 6 &&
          tiles[12] == 6 && tiles[13] == 70 && tiles[14] == 3);
    std::vector<int32_t> none;
    CHECK(append_pair_tiles(group.data(), 5, 5, 32, none) == 0 && none.empty());
    std::printf("test_staged_misses: %s\n", test::failures() ? "FAILED" : "ok");
    return test::exit_code();
}
