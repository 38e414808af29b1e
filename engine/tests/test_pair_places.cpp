// The device join's choice of where each (token, expert) pair is computed (experts/pair_places.h, also compiled
// into the plan kernel): cached pairs stay on their slot, the first round(share · distinct) missed experts in id
// order are read zero-copy, the rest go to the CPU, and all pairs of one expert go to one place.
#include <algorithm>
#include <cstdint>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "check.h"
#include "experts/pair_places.h"
#include "experts/staged_misses.h"

using namespace strata;

namespace {

struct Result {
    std::vector<int32_t> slot, place;
    int n_cpu = 0;
};

Result place(const std::vector<int32_t>& ids, const std::map<int32_t, int32_t>& slots, double share, bool zc) {
    Result r;
    r.slot.assign(ids.size(), 7);
    r.place.assign(ids.size(), 7);
    for (size_t p = 0; p < ids.size(); ++p) {
        auto it = slots.find(ids[p]);
        r.slot[p] = it == slots.end() ? -1 : it->second;
    }
    r.n_cpu = place_pairs(ids.data(), r.slot.data(), (int)ids.size(), share, zc, r.place.data());
    return r;
}

void test_cases() {
    // One decode token, top-10: experts 3 and 40 cached, eight misses.
    const std::vector<int32_t> ids = {40, 9, 3, 100, 7, 55, 12, 8, 61, 2};
    const std::map<int32_t, int32_t> slots = {{3, 0}, {40, 5}};
    Result r = place(ids, slots, 0.0, true);
    CHECK(r.n_cpu == 8);
    CHECK(r.place[0] == kPairCached && r.slot[0] == 5 && r.place[2] == kPairCached && r.slot[2] == 0);
    for (int p : {1, 3, 4, 5, 6, 7, 8, 9}) CHECK(r.place[p] == kPairCpu && r.slot[p] == -1);
    // share 0.5 of 8 distinct misses = 4: the lowest ids 2, 7, 8, 9 zero-copy, 12, 55, 61, 100 on the CPU.
    r = place(ids, slots, 0.5, true);
    CHECK(r.n_cpu == 4);
    for (int p : {9, 4, 7, 1}) CHECK(r.place[p] == kPairZeroCopy);
    for (int p : {6, 5, 8, 3}) CHECK(r.place[p] == kPairCpu);
    // Without zero-copy (unmapped host tensors) the share gives nothing to the GPU.
    r = place(ids, slots, 0.5, false);
    CHECK(r.n_cpu == 8);
    // share 1: every miss zero-copy; all cached: nothing for the CPU.
    r = place(ids, slots, 1.0, true);
    CHECK(r.n_cpu == 0);
    std::map<int32_t, int32_t> all;
    for (int32_t e : ids) all[e] = e % 13;
    r = place(ids, all, 0.5, true);
    CHECK(r.n_cpu == 0);
    for (size_t p = 0; p < ids.size(); ++p) CHECK(r.place[p] == kPairCached && r.slot[p] == ids[p] % 13);
    // Several tokens sharing experts (T = 4, k = 4): distinct misses counted once, one place per expert.
    const std::vector<int32_t> win = {5, 9, 1, 30, 9, 5, 2, 30, 1, 9, 30, 4, 30, 2, 9, 5};
    r = place(win, {{9, 2}}, 0.5, true);   // misses 1, 2, 4, 5, 30: round(2.5) = 3 → 1, 2, 4 zero-copy
    for (size_t p = 0; p < win.size(); ++p) {
        const int32_t e = win[p];
        const int want = e == 9 ? kPairCached : (e == 1 || e == 2 || e == 4) ? kPairZeroCopy : kPairCpu;
        CHECK(r.place[p] == want);
    }
    CHECK(r.n_cpu == 7);   // expert 5 three times, 30 four times
}

// The zero-copy experts are the ones staged_split stages for the same grouped misses and share.
void test_matches_staged_split() {
    std::mt19937 rng(7);
    for (int round = 0; round < 2000; ++round) {
        const int P = 1 + (int)(rng() % kPlacePairsMax);   // up to a verify window's 64 pairs
        std::vector<int32_t> ids(P);
        for (int32_t& e : ids) e = (int32_t)(rng() % 80);
        std::map<int32_t, int32_t> slots;
        for (int e = 0; e < 80; ++e)
            if (rng() % 3 == 0) slots[e] = e;
        const double share = (double)(rng() % 11) / 10;
        const Result r = place(ids, slots, share, true);
        std::vector<ExpertPair> grouped;
        for (int p = 0; p < P; ++p)
            if (!slots.count(ids[p])) grouped.push_back(ExpertPair{p, ids[p]});
        std::stable_sort(grouped.begin(), grouped.end(),
                         [](const ExpertPair& a, const ExpertPair& b) { return a.expert < b.expert; });
        const StagedSplit s = staged_split(grouped, false, share);
        int zc_pairs = 0, cpu = 0;
        for (int p = 0; p < P; ++p) {
            zc_pairs += r.place[p] == kPairZeroCopy;
            cpu += r.place[p] == kPairCpu;
        }
        CHECK(zc_pairs == s.pairs);
        CHECK(cpu == r.n_cpu && cpu == (int)grouped.size() - s.pairs);
        for (int i = 0; i < s.pairs; ++i) CHECK(r.place[grouped[i].token] == kPairZeroCopy);
    }
}

// With a carry, the zero-copy experts of many calls add up to share · (their misses), within one expert, though
// each call of 4 misses can only take a whole number; without one, share 0.3 of 4 misses is always 1 (25%).
void test_carry_keeps_the_share() {
    std::mt19937 rng(11);
    for (double share : {0.0, 0.15, 0.3, 0.45, 0.6, 0.85, 1.0}) {
        float carry = 0;
        int64_t misses = 0, zc = 0, zc_plain = 0;
        for (int call = 0; call < 3000; ++call) {
            std::vector<int32_t> ids(10), slot(10), place(10);
            for (int p = 0; p < 10; ++p) {
                ids[p] = (int32_t)(p * 7 + rng() % 7);   // distinct experts
                slot[p] = p < 6 ? p : -1;                // 4 missed experts a call
            }
            place_pairs(ids.data(), slot.data(), 10, share, true, place.data(), &carry);
            for (int p = 0; p < 10; ++p) zc += place[p] == kPairZeroCopy;
            place_pairs(ids.data(), slot.data(), 10, share, true, place.data());
            for (int p = 0; p < 10; ++p) zc_plain += place[p] == kPairZeroCopy;
            misses += 4;
            CHECK(carry >= -1 && carry <= 1);
        }
        CHECK(std::abs((double)zc - share * (double)misses) <= 1.0);
        if (share == 0.3) CHECK(zc_plain == misses / 4);   // round(1.2) = 1 every call
    }
    {   // a cap on the zero-copy experts: the first max_zero_copy in id order, the rest to the CPU
        std::vector<int32_t> ids = {9, 3, 7, 5, 3}, slot(5, -1), place(5);
        CHECK(place_pairs(ids.data(), slot.data(), 5, 1.0, true, place.data(), nullptr, 2) == 2);   // experts 3 and 5 zero-copy; 7 and 9 on the CPU
        const int want[5] = {kPairCpu, kPairZeroCopy, kPairCpu, kPairZeroCopy, kPairZeroCopy};
        for (int p = 0; p < 5; ++p) CHECK(place[p] == want[p]);
    }
    float carry = 0.4f;   // without zero-copy the carry is left alone and nothing is read zero-copy
    std::vector<int32_t> ids = {1, 2}, slot = {-1, -1}, place(2);
    CHECK(place_pairs(ids.data(), slot.data(), 2, 0.5, false, place.data(), &carry) == 2 && carry == 0.4f);
}

}  // namespace

int main() {
    test_cases();
    test_matches_staged_split();
    test_carry_keeps_the_share();
    return test::exit_code();
}
