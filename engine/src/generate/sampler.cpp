// Sampler: penalties → top-k → temperature softmax → min-p → top-p → draw. See sampler.h and protocol.md §3.
#include "generate/sampler.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace strata {

namespace {

// Ordering of candidates: higher logit first, equal logits to the lower id.
bool better(const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// A uniform double in [0, 1) from 53 random bits; independent of the standard library's distributions.
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace

void penalise_window(const float* logits, int n_vocab, std::span<const int32_t> history,
                     const SamplingParams& params, std::vector<Candidate>& out) {
    out.clear();
    if (!params.has_penalties() || history.empty()) return;
    size_t n = std::min(history.size(), static_cast<size_t>(std::max(params.penalty_window, 0)));
    std::vector<int32_t> window(history.end() - n, history.end());
    std::sort(window.begin(), window.end());
    for (size_t i = 0; i < window.size();) {
        size_t j = i;
        while (j < window.size() && window[j] == window[i]) ++j;
        int32_t id = window[i];
        if (id >= 0 && id < n_vocab) {
            double v = logits[id];
            if (params.repeat_penalty != 1.0) v = v > 0 ? v / params.repeat_penalty : v * params.repeat_penalty;
            v -= params.frequency_penalty * static_cast<double>(j - i);
            v -= params.presence_penalty;
            out.push_back({id, static_cast<float>(v)});
        }
        i = j;
    }
}

void top_candidates(const float* logits, int n_vocab, std::span<const Candidate> penalised, int k,
                    std::vector<Candidate>& out) {
    out.clear();
    k = std::max(1, std::min(k, n_vocab));
    // Min-heap (by `better`) of the best k seen so far: the worst kept candidate is at the front.
    auto heap_cmp = [](const Candidate& a, const Candidate& b) { return better(a, b); };
    auto offer = [&](Candidate c) {
        if (static_cast<int>(out.size()) < k) {
            out.push_back(c);
            std::push_heap(out.begin(), out.end(), heap_cmp);
        } else if (better(c, out.front())) {
            std::pop_heap(out.begin(), out.end(), heap_cmp);
            out.back() = c;
            std::push_heap(out.begin(), out.end(), heap_cmp);
        }
    };
    size_t p = 0;  // penalised is sorted by id: skip those ids in the scan and offer their new values
    for (int id = 0; id < n_vocab; ++id) {
        if (p < penalised.size() && penalised[p].id == id) {
            offer(penalised[p++]);
            continue;
        }
        float v = logits[id];
        if (std::isnan(v)) continue;
        if (static_cast<int>(out.size()) < k || v >= out.front().logit) offer({id, v});
    }
    std::sort(out.begin(), out.end(), better);
}

void top_allowed(const float* logits, int n_vocab, std::span<const Candidate> penalised, int k,
                 const TokenFilter& filter, std::vector<Candidate>& out, std::vector<Candidate>& scratch) {
    out.clear();
    top_candidates(logits, n_vocab, penalised, kMaxTopK, scratch);
    for (const Candidate& c : scratch) {
        if (static_cast<int>(out.size()) >= k) return;
        if (filter.allows(c.id)) out.push_back(c);
    }
    if (static_cast<int>(out.size()) >= k || static_cast<int>(scratch.size()) >= n_vocab) return;
    // The slow path (a grammar that wants what the model does not): every token that may be allowed, best first.
    out.clear();
    scratch.clear();
    auto offer = [&](int id) {   // (penalised is sorted by id)
        float v = logits[id];
        if (!penalised.empty()) {
            auto it = std::lower_bound(penalised.begin(), penalised.end(), id,
                                       [](const Candidate& c, int x) { return c.id < x; });
            if (it != penalised.end() && it->id == id) v = it->logit;
        }
        if (!std::isnan(v) && filter.may_allow(id)) scratch.push_back({id, v});
    };
    std::vector<int32_t> ids;
    if (filter.candidate_ids(ids)) {
        for (int32_t id : ids)
            if (id >= 0 && id < n_vocab) offer(id);
    } else {
        for (int id = 0; id < n_vocab; ++id) offer(id);
    }
    // In windows of growing size, each put in order only when the one before did not give k (a whole-vocabulary sort
    // costs ~20 ms at 248K tokens; most searches end in the first window).
    size_t done = 0;
    for (size_t window = 256; done < scratch.size() && static_cast<int>(out.size()) < k; window *= 4) {
        const size_t end = std::min(scratch.size(), done + window);
        if (end < scratch.size()) std::nth_element(scratch.begin() + done, scratch.begin() + end, scratch.end(), better);
        std::sort(scratch.begin() + done, scratch.begin() + end, better);
        for (size_t i = done; i < end && static_cast<int>(out.size()) < k; ++i)
            if (filter.allows(scratch[i].id)) out.push_back(scratch[i]);
        done = end;
    }
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), seed_(params.seed ? *params.seed : std::random_device{}() * 0x9E3779B97F4A7C15ull ^
                                                             std::random_device{}()),
      rng_(seed_) {}

void Sampler::prepare(const float* logits, int n_vocab, std::span<const int32_t> history, const TokenFilter* filter) {
    STRATA_CHECK(n_vocab > 0, "sampler: empty logits row");
    penalise_window(logits, n_vocab, history, params_, penalised_);
    const int k = params_.greedy() ? 1 : params_.top_k > 0 ? std::min(params_.top_k, kMaxTopK) : kMaxTopK;
    keep_ = 1;
    if (filter) {
        top_allowed(logits, n_vocab, penalised_, k, *filter, top_, scan_);
        if (top_.empty()) fail("grammar: no token of the vocabulary can continue the text here");
    } else if (params_.greedy() && penalised_.empty()) {
        const int32_t id = argmax_first(logits, n_vocab);
        top_.assign(1, {id, logits[id]});
    } else {
        top_candidates(logits, n_vocab, penalised_, k, top_);
    }
    if (params_.greedy()) return;

    // Softmax with temperature over the candidates (best first, so probs_ is descending).
    probs_.resize(top_.size());
    double best = top_[0].logit;
    double sum = 0;
    for (size_t i = 0; i < top_.size(); ++i) {
        probs_[i] = std::exp((top_[i].logit - best) / params_.temperature);
        sum += probs_[i];
    }
    for (double& q : probs_) q /= sum;

    size_t keep = probs_.size();
    if (params_.min_p > 0) {
        double floor = params_.min_p * probs_[0];
        while (keep > 1 && probs_[keep - 1] < floor) --keep;
    }
    if (params_.top_p < 1.0) {
        double cum = 0;
        for (size_t i = 0; i < keep; ++i) {
            cum += probs_[i];
            if (cum >= params_.top_p) { keep = i + 1; break; }
        }
    }
    keep_ = keep;
}

int32_t Sampler::sample(const float* logits, int n_vocab, std::span<const int32_t> history, const TokenFilter* filter,
                        int32_t exclude) {
    prepare(logits, n_vocab, history, filter);
    if (params_.greedy()) return top_[0].id;   // (a rejected greedy draft is never the greedy choice)
    double total = 0;
    for (size_t i = 0; i < keep_; ++i)
        if (top_[i].id != exclude) total += probs_[i];
    if (!(total > 0)) return top_[0].id;        // only the excluded token had weight: it cannot have been rejected
    double u = uniform01(rng_) * total;
    double cum = 0;
    size_t last = 0;
    for (size_t i = 0; i < keep_; ++i) {
        if (top_[i].id == exclude) continue;
        cum += probs_[i];
        last = i;
        if (u < cum) return top_[i].id;
    }
    return top_[last].id;
}

bool Sampler::accepts(const float* logits, int n_vocab, std::span<const int32_t> history, const TokenFilter* filter,
                      int32_t draft) {
    prepare(logits, n_vocab, history, filter);
    if (params_.greedy()) return top_[0].id == draft;
    double total = 0, p = 0;
    for (size_t i = 0; i < keep_; ++i) {
        total += probs_[i];
        if (top_[i].id == draft) p = probs_[i];
    }
    return uniform01(rng_) * total < p;
}

}  // namespace strata
