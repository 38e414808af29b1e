// The expert cache's policy (experts/expert_cache.h) and the routing profile file: sizes, initial fills, hit
// counting, decayed counts, planned moves and their hand-over, profile round trips and bad files.
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "check.h"
#include "common/error.h"
#include "experts/expert_cache.h"
#include "experts/routing_profile.h"

using namespace strata;

template <class Fn>
static std::string error_of(Fn&& fn) {
    try { fn(); } catch (const Error& e) { return e.what(); }
    return "";
}

static void test_sizes() {
    CHECK(parse_cache_size("auto").kind == CacheSize::Kind::automatic);
    CacheSize s = parse_cache_size("4100-slots");
    CHECK(s.kind == CacheSize::Kind::slots && s.value == 4100);
    s = parse_cache_size("1.5-GiB");
    CHECK(s.kind == CacheSize::Kind::bytes && s.value == 1.5 * 1073741824.0);
    CHECK(error_of([] { parse_cache_size("12GB"); }).find("'12GB'") != std::string::npos);
    CHECK(error_of([] { parse_cache_size("x-slots"); }).find("'x'") != std::string::npos);
    CHECK(!error_of([] { parse_cache_size("2.5-slots"); }).empty());
    CHECK(!error_of([] { parse_cache_size("-3-slots"); }).empty());

    const size_t MiB = 1 << 20;
    // auto: (free − reserve) / bytes, capped by the experts and by --gpu-experts-max
    CHECK(resolve_cache_slots(parse_cache_size("auto"), 10 * MiB, 1000 * MiB, 100 * MiB, 1000, -1) == 90);
    CHECK(resolve_cache_slots(parse_cache_size("auto"), 10 * MiB, 1000 * MiB, 100 * MiB, 50, -1) == 50);
    CHECK(resolve_cache_slots(parse_cache_size("auto"), 10 * MiB, 1000 * MiB, 100 * MiB, 1000, 7) == 7);
    CHECK(resolve_cache_slots(parse_cache_size("auto"), 10 * MiB, 50 * MiB, 100 * MiB, 1000, -1) == 0);
    CHECK(resolve_cache_slots(parse_cache_size("30-slots"), 10 * MiB, 1000 * MiB, 100 * MiB, 1000, -1) == 30);
    CHECK(resolve_cache_slots(parse_cache_size("1-GiB"), 10 * MiB, 2000 * MiB, 100 * MiB, 1000, -1) == 102);
    // explicit sizes must fit; the cap applies before the check
    const std::string err = error_of([&] {
        resolve_cache_slots(parse_cache_size("100-slots"), 10 * MiB, 1000 * MiB, 100 * MiB, 1000, -1);
    });
    CHECK_MSG(err.find("900 MiB are free") != std::string::npos && err.find("--vram-reserve-mib") != std::string::npos,
              "%s", err.c_str());
    CHECK(resolve_cache_slots(parse_cache_size("100-slots"), 10 * MiB, 1000 * MiB, 100 * MiB, 1000, 20) == 20);
}

static void test_even_fill() {
    ExpertCache c(3, 8, 10, nullptr, AdaptSettings{});
    CHECK(c.total_slots() == 10);
    CHECK(c.slots(0) == 4 && c.slots(1) == 3 && c.slots(2) == 3);
    for (int l = 0; l < 3; ++l)
        for (int e = 0; e < 8; ++e) CHECK(c.slot_of(l, e) == (e < c.slots(l) ? e : -1));
    ExpertCache none(3, 8, 0, nullptr, AdaptSettings{});
    CHECK(none.slots(0) == 0 && none.slot_of(1, 0) == -1);
    ExpertCache all(3, 8, 1000, nullptr, AdaptSettings{});   // more than the experts: every one
    CHECK(all.total_slots() == 24 && all.slot_of(2, 7) >= 0);
}

static void test_profile_fill() {
    RoutingProfile p(2, 6);
    // layer 0 concentrated on experts 4 and 1; layer 1 spread evenly
    std::vector<int32_t> l0 = {4, 4, 4, 4, 4, 4, 1, 1, 1, 2};
    std::vector<int32_t> l1 = {0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5};
    p.add(0, l0.data(), (int)l0.size());
    p.add(1, l1.data(), (int)l1.size());
    ExpertCache c(2, 6, 4, &p, AdaptSettings{});
    // shares: l0: 4 → .6, 1 → .3, 2 → .1; l1: each 1/6. The top four overall: (0,4), (0,1), then (1,0), (1,1)
    CHECK(c.slots(0) == 2 && c.slots(1) == 2);
    CHECK(c.slot_of(0, 4) == 0 && c.slot_of(0, 1) == 1 && c.slot_of(0, 2) == -1);
    CHECK(c.slot_of(1, 0) == 0 && c.slot_of(1, 1) == 1 && c.slot_of(1, 5) == -1);
    RoutingProfile wrong(3, 6);
    CHECK(error_of([&] { ExpertCache bad(2, 6, 4, &wrong, AdaptSettings{}); }).find("3 layers") != std::string::npos);
}

static void test_record_and_moves() {
    AdaptSettings a;
    a.every_passes = 2;
    a.decay = 0.5;
    a.max_moves = 2;
    a.min_gain = 1.0;
    ExpertCache c(1, 8, 3, nullptr, a);   // residents 0, 1, 2
    std::vector<int32_t> ids = {0, 5, 6, 5};
    CHECK(c.record(0, ids.data(), 4) == 1);
    CHECK(c.hits() == 1 && c.lookups() == 4);
    CHECK(c.count(0, 5) == 2.0 && c.count(0, 0) == 1.0);
    CHECK(c.plan_moves(0).empty());           // due only after two passes
    CHECK(c.record(0, ids.data(), 4) == 1);
    CHECK(c.count(0, 5) == 3.0 && c.count(0, 6) == 1.5 && c.count(0, 0) == 1.5);
    std::vector<CacheMove> moves = c.plan_moves(0);
    // Missing by count: 5 (3.0), 6 (1.5). Residents by count: 1 (0), 2 (0), 0 (1.5).
    // 5 replaces 1 (gain 3), 6 replaces 2 (gain 1.5 ≥ 1).
    CHECK(moves.size() == 2);
    if (moves.size() == 2) {
        CHECK(moves[0].slot == 1 && moves[0].old_expert == 1 && moves[0].new_expert == 5);
        CHECK(moves[1].slot == 2 && moves[1].old_expert == 2 && moves[1].new_expert == 6);
    }
    // In transit: neither the old nor the new expert is found, and the slot holds nothing.
    CHECK(c.slot_of(0, 1) == -1 && c.slot_of(0, 5) == -1 && c.expert_in(0, 1) == -1);
    CHECK(c.moves_in_flight() == 2);
    CHECK(c.record(0, ids.data(), 4) == 1);   // only expert 0 hits while the copies travel
    CHECK(c.record(0, ids.data(), 4) == 1);
    CHECK(c.plan_moves(0).empty());           // arriving experts are not planned again; nothing else gains
    for (const CacheMove& m : moves) c.finish_move(m);
    CHECK(c.moves_in_flight() == 0 && c.moves_done() == 2);
    CHECK(c.slot_of(0, 5) == 1 && c.slot_of(0, 6) == 2 && c.expert_in(0, 2) == 6);
    CHECK(c.record(0, ids.data(), 4) == 4);
    CHECK(c.hits() == 8 && c.lookups() == 20);

    // Frozen: counts still move, the residents do not.
    a.every_passes = 0;
    ExpertCache frozen(1, 8, 2, nullptr, a);
    for (int i = 0; i < 10; ++i) frozen.record(0, ids.data(), 4);
    CHECK(frozen.plan_moves(0).empty() && frozen.slot_of(0, 5) == -1);

    // The gain threshold holds back a move that would only swap equals.
    a.every_passes = 1;
    a.min_gain = 1.0;
    ExpertCache even(1, 4, 2, nullptr, a);
    std::vector<int32_t> flat = {0, 1, 2, 3};
    even.record(0, flat.data(), 4);
    CHECK(even.plan_moves(0).empty());
}

static void test_profile_seeds_counts() {
    RoutingProfile p(1, 4);
    std::vector<int32_t> hot = {3, 3, 3, 3};
    p.add(0, hot.data(), 4);
    AdaptSettings a;
    a.every_passes = 1;
    a.decay = 0.5;
    ExpertCache c(1, 4, 1, &p, a);
    CHECK(c.slot_of(0, 3) == 0);
    // One pass routing expert 0 once: the profile seed (share 1 · n / (1 − decay) = 2 for expert 3) keeps 3 ahead.
    std::vector<int32_t> one = {0};
    c.record(0, one.data(), 1);
    CHECK(c.count(0, 3) == 1.0 && c.count(0, 0) == 1.0);
    CHECK(c.plan_moves(0).empty());
}

static void test_profile_file() {
    const std::string path = "/tmp/test_expert_cache_" + std::to_string(::getpid()) + ".profile";
    RoutingProfile p(2, 3);
    std::vector<int32_t> ids = {2, 2, 0};
    p.add(1, ids.data(), 3);
    p.save(path);
    RoutingProfile q = RoutingProfile::load(path);
    CHECK(q.n_layers() == 2 && q.n_experts() == 3);
    CHECK(q.count(1, 2) == 2 && q.count(1, 0) == 1 && q.count(0, 0) == 0 && q.layer_total(1) == 3);
    CHECK(error_of([&] { p.add(0, std::vector<int32_t>{3}.data(), 1); }).find("expert 3") != std::string::npos);

    auto write = [&](const std::string& text) { std::ofstream(path) << text; };
    write("strata-routing-profile 1\nlayers 2 experts 3\n1 2 3\n4 5\n");
    CHECK(error_of([&] { RoutingProfile::load(path); }).find("layer 1 has no count for expert 2") != std::string::npos);
    write("strata-routing-profile 1\nlayers 1 experts 2\n1 -2\n");
    CHECK(error_of([&] { RoutingProfile::load(path); }).find("count -2") != std::string::npos);
    write("strata-routing-profile 1\nlayers 1 experts 2\n1 2 3\n");
    CHECK(error_of([&] { RoutingProfile::load(path); }).find("unexpected text '3'") != std::string::npos);
    write("something else\n");
    CHECK(error_of([&] { RoutingProfile::load(path); }).find("first line") != std::string::npos);
    std::remove(path.c_str());
    CHECK(error_of([&] { RoutingProfile::load(path); }).find("cannot open") != std::string::npos);
}

int main() {
    test_sizes();
    test_even_fill();
    test_profile_fill();
    test_record_and_moves();
    test_profile_seeds_counts();
    test_profile_file();
    return test::exit_code();
}
