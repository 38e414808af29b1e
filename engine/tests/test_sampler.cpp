// Sampler: greedy argmax and ties, seeded determinism, top-k / min-p / top-p limits, penalties and their window,
// and the drawn frequencies following the softmax.
#include <cmath>
#include <set>
#include <vector>

#include "check.h"
#include "generate/sampler.h"

using strata::Sampler;
using strata::SamplingParams;

static std::vector<float> ramp(int n) {  // logits with a known order: id i gets (i * 7919) % n / 100
    std::vector<float> v(n);
    for (int i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7919) % n) / 100.0f;
    return v;
}

static int argmax(const std::vector<float>& v) {
    int best = 0;
    for (int i = 1; i < static_cast<int>(v.size()); ++i)
        if (v[i] > v[best]) best = i;
    return best;
}

static void test_greedy() {
    std::vector<float> logits = ramp(1000);
    Sampler s(SamplingParams{});
    CHECK(s.sample(logits.data(), 1000, {}) == argmax(logits));
    std::vector<float> ties(10, 1.0f);
    ties[3] = 2.0f; ties[7] = 2.0f;
    CHECK(s.sample(ties.data(), 10, {}) == 3);  // equal logits go to the lower id
    std::vector<float> with_nan = {NAN, 0.5f, 0.25f};
    CHECK(s.sample(with_nan.data(), 3, {}) == 1);
}

// argmax_first against the candidate heap (top_candidates with k = 1) on rows with ties, NaN, ±inf, and lengths
// around the block and lane sizes.
static void test_argmax_first() {
    uint64_t state = 12345;
    auto next = [&] { state = state * 6364136223846793005ull + 1442695040888963407ull; return (uint32_t)(state >> 33); };
    std::vector<strata::Candidate> top;
    for (int n : {1, 2, 15, 16, 17, 511, 512, 513, 1000, 4099}) {
        for (int trial = 0; trial < 20; ++trial) {
            std::vector<float> v(n);
            for (float& x : v) {
                const uint32_t r = next() % 100;
                x = r < 3 ? NAN : r < 5 ? -INFINITY : r < 6 ? INFINITY * (trial % 3 == 0) : (float)(next() % 50) / 7.0f;
                if (std::isnan(x) && trial == 7) x = -INFINITY;   // rows of -inf only among the trials
            }
            if (trial == 9) for (float& x : v) x = NAN;
            strata::top_candidates(v.data(), n, {}, 1, top);
            const int want = top.empty() ? 0 : top[0].id;
            CHECK(strata::argmax_first(v.data(), n) == want);
        }
    }
    std::vector<float> last_max(1537, 0.0f);
    last_max[1536] = 1.0f;
    CHECK(strata::argmax_first(last_max.data(), 1537) == 1536);
    std::vector<float> zeros = {-0.0f, 0.0f, -0.0f};
    CHECK(strata::argmax_first(zeros.data(), 3) == 0);   // -0 == 0: the lower id
}

static std::vector<int> draws(const SamplingParams& p, const std::vector<float>& logits, int n) {
    Sampler s(p);
    std::vector<int> out;
    for (int i = 0; i < n; ++i) out.push_back(s.sample(logits.data(), static_cast<int>(logits.size()), {}));
    return out;
}

static void test_seeded_determinism() {
    std::vector<float> logits(5000);
    for (int i = 0; i < 5000; ++i) logits[i] = std::sin(i * 0.37f) * 3.0f;
    SamplingParams p;
    p.temperature = 1.0;
    p.seed = 1234;
    std::vector<int> a = draws(p, logits, 200), b = draws(p, logits, 200);
    CHECK(a == b);
    p.seed = 1235;
    std::vector<int> c = draws(p, logits, 200);
    CHECK(a != c);
    CHECK(std::set<int>(a.begin(), a.end()).size() > 5);  // it really samples
}

static void test_limits() {
    std::vector<float> logits(3000);
    for (int i = 0; i < 3000; ++i) logits[i] = static_cast<float>(i % 997) * 0.001f;  // nearly flat
    SamplingParams p;
    p.temperature = 5.0;
    p.seed = 7;
    // Default top_k is the 64 cap: only the 64 best ids are ever drawn.
    std::vector<float> sorted = logits;
    std::vector<strata::Candidate> top64;
    strata::top_candidates(logits.data(), 3000, {}, 64, top64);
    CHECK(top64.size() == 64);
    std::set<int> allowed;
    for (auto& c : top64) allowed.insert(c.id);
    for (int id : draws(p, logits, 2000)) CHECK_MSG(allowed.count(id), "id %d outside the top 64", id);
    p.top_k = 3;
    std::set<int> seen;
    for (int id : draws(p, logits, 500)) seen.insert(id);
    CHECK(seen.size() == 3);
    for (int i = 0; i < 3; ++i) CHECK(seen.count(top64[i].id));
    p.top_k = 1;
    for (int id : draws(p, logits, 50)) CHECK(id == top64[0].id);
    // top_p tiny: only the best token.
    p.top_k = 0;
    p.top_p = 1e-6;
    for (int id : draws(p, logits, 50)) CHECK(id == top64[0].id);
    // min_p: two clear winners, everything else far below min_p of the best.
    std::vector<float> two(100, 0.0f);
    two[10] = 10.0f; two[20] = 9.8f;
    SamplingParams q;
    q.temperature = 1.0;
    q.min_p = 0.05;
    q.seed = 3;
    std::set<int> got;
    for (int id : draws(q, two, 500)) got.insert(id);
    CHECK(got == std::set<int>({10, 20}));
}

static void test_frequencies() {
    std::vector<float> logits = {1.0f, 0.0f};  // softmax: 0.731, 0.269
    SamplingParams p;
    p.temperature = 1.0;
    p.seed = 99;
    int n = 20000, zeros = 0;
    for (int id : draws(p, logits, n)) zeros += id == 0;
    double f = static_cast<double>(zeros) / n, want = 1.0 / (1.0 + std::exp(-1.0));
    CHECK_MSG(std::fabs(f - want) < 0.015, "frequency %.4f, softmax %.4f", f, want);
    p.temperature = 0.5;  // sharper: e^2 / (1 + e^2) = 0.881
    zeros = 0;
    for (int id : draws(p, logits, n)) zeros += id == 0;
    f = static_cast<double>(zeros) / n;
    want = 1.0 / (1.0 + std::exp(-2.0));
    CHECK_MSG(std::fabs(f - want) < 0.015, "frequency %.4f, softmax %.4f", f, want);
}

static void test_penalties() {
    std::vector<float> logits(50, 0.0f);
    logits[5] = 3.0f; logits[6] = 2.5f; logits[7] = -1.0f;
    SamplingParams p;
    p.repeat_penalty = 2.0;  // 3.0 → 1.5 once 5 is in the window
    std::vector<int32_t> history = {5};
    Sampler s(p);
    CHECK(s.sample(logits.data(), 50, history) == 6);
    CHECK(s.sample(logits.data(), 50, {}) == 5);
    // Window: 5 falls out of a window of 2.
    p.penalty_window = 2;
    Sampler w(p);
    std::vector<int32_t> old = {5, 1, 2};
    CHECK(w.sample(logits.data(), 50, old) == 5);
    // Frequency penalty counts occurrences; presence penalty applies once.
    SamplingParams f;
    f.frequency_penalty = 0.3;
    std::vector<int32_t> twice = {5, 5};
    std::vector<strata::Candidate> pen;
    strata::penalise_window(logits.data(), 50, twice, f, pen);
    CHECK(pen.size() == 1 && pen[0].id == 5 && std::fabs(pen[0].logit - 2.4f) < 1e-6);
    SamplingParams pr;
    pr.presence_penalty = 1.0;
    strata::penalise_window(logits.data(), 50, twice, pr, pen);
    CHECK(pen.size() == 1 && std::fabs(pen[0].logit - 2.0f) < 1e-6);
    CHECK(Sampler(pr).sample(logits.data(), 50, twice) == 6);
    // A negative logit is multiplied by the repeat penalty.
    SamplingParams r;
    r.repeat_penalty = 2.0;
    std::vector<int32_t> neg = {7};
    strata::penalise_window(logits.data(), 50, neg, r, pen);
    CHECK(pen.size() == 1 && std::fabs(pen[0].logit + 2.0f) < 1e-6);
}

// Speculative sampling with one proposed token: accepting draft d with its probability and otherwise drawing without
// d gives every token its probability (here with top-k, min-p, top-p and a temperature, and drafts good and bad).
static void test_draft_acceptance_follows_the_distribution() {
    std::vector<float> logits = {2.0f, 1.5f, 1.4f, 0.3f, -0.5f, -2.0f, 0.9f, 0.0f};
    const int V = (int)logits.size();
    SamplingParams p;
    p.temperature = 0.8;
    p.top_k = 6;
    p.min_p = 0.02;
    p.top_p = 0.97;
    p.seed = 5;
    Sampler ref(p);
    const int n = 200000;
    std::vector<double> want(V, 0.0);
    for (int i = 0; i < n; ++i) want[ref.sample(logits.data(), V, {})] += 1.0 / n;
    for (int32_t draft : {0, 2, 6, 5}) {   // the best, a middle one, a low one, one the limits drop
        SamplingParams q = p;
        q.seed = 11 + draft;
        Sampler s(q);
        std::vector<double> got(V, 0.0);
        int accepted = 0;
        for (int i = 0; i < n; ++i) {
            const bool ok = s.accepts(logits.data(), V, {}, nullptr, draft);
            accepted += ok;
            got[ok ? draft : s.sample(logits.data(), V, {}, nullptr, draft)] += 1.0 / n;
        }
        CHECK_MSG(std::fabs(accepted / (double)n - want[draft]) < 0.006, "draft %d accepted %.4f, p %.4f", draft,
                  accepted / (double)n, want[draft]);
        for (int t = 0; t < V; ++t)
            CHECK_MSG(std::fabs(got[t] - want[t]) < 0.006, "draft %d: token %d %.4f against %.4f", draft, t, got[t],
                      want[t]);
    }
    CHECK(want[5] == 0.0);   // (top-k drops it: a draft of it is never accepted)
    // Greedy: a draft stands exactly when it is the choice, with no draw.
    Sampler g(SamplingParams{});
    CHECK(g.accepts(logits.data(), V, {}, nullptr, 0) && !g.accepts(logits.data(), V, {}, nullptr, 1));
}

int main() {
    test_draft_acceptance_follows_the_distribution();
    test_argmax_first();
    test_greedy();
    test_seeded_determinism();
    test_limits();
    test_frequencies();
    test_penalties();
    return test::exit_code();
}
