// ExpertCache: slot assignment, decayed counts and the move planner (see expert_cache.h).
#include "experts/expert_cache.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.h"

namespace strata {

CacheSize parse_cache_size(const std::string& text) {
    CacheSize s;
    if (text == "auto") return s;
    auto number = [&](const std::string& digits) {
        size_t used = 0;
        double v = -1;
        try { v = std::stod(digits, &used); } catch (...) { used = 0; }
        STRATA_CHECK(used == digits.size() && !digits.empty() && std::isfinite(v) && v >= 0, "--expert-cache '", text,
                     "': '", digits, "' is not a non-negative number");
        return v;
    };
    auto ends_with = [&](const std::string& suffix) {
        return text.size() > suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (ends_with("-slots")) {
        s.kind = CacheSize::Kind::slots;
        s.value = number(text.substr(0, text.size() - 6));
        STRATA_CHECK(s.value == std::floor(s.value), "--expert-cache '", text, "': a slot count must be whole");
    } else if (ends_with("-GiB")) {
        s.kind = CacheSize::Kind::bytes;
        s.value = number(text.substr(0, text.size() - 4)) * 1073741824.0;
    } else {
        fail("--expert-cache must be auto, N-slots or N-GiB (e.g. 4100-slots, 5.5-GiB), got '", text, "'");
    }
    return s;
}

int64_t resolve_cache_slots(const CacheSize& size, size_t expert_bytes, size_t free_bytes, size_t reserve_bytes,
                            int64_t total_experts, int64_t max_slots) {
    STRATA_CHECK(expert_bytes > 0, "expert cache: an expert of 0 bytes");
    const size_t avail = free_bytes > reserve_bytes ? free_bytes - reserve_bytes : 0;
    int64_t slots = 0;
    switch (size.kind) {
    case CacheSize::Kind::automatic: slots = (int64_t)(avail / expert_bytes); break;
    case CacheSize::Kind::slots: slots = (int64_t)size.value; break;
    case CacheSize::Kind::bytes: slots = (int64_t)(size.value / (double)expert_bytes); break;
    }
    slots = std::min(slots, total_experts);
    if (max_slots >= 0) slots = std::min(slots, max_slots);
    if (size.kind != CacheSize::Kind::automatic && (size_t)slots * expert_bytes > avail)
        fail("--expert-cache: ", slots, " slots of ", expert_bytes, " bytes need ",
             ((size_t)slots * expert_bytes) >> 20, " MiB, but only ", avail >> 20, " MiB are free after the reserve of ",
             reserve_bytes >> 20, " MiB (--vram-reserve-mib and the context's KV: a smaller --ctx frees some)");
    return slots;
}

ExpertCache::ExpertCache(int n_layers, int n_experts, int64_t total_slots, const RoutingProfile* profile,
                         AdaptSettings adapt)
    : n_layers_(n_layers), n_experts_(n_experts), adapt_(adapt) {
    STRATA_CHECK(n_layers > 0 && n_experts > 0, "expert cache: ", n_layers, " layers × ", n_experts, " experts");
    STRATA_CHECK(adapt.decay > 0 && adapt.decay <= 1, "expert cache: decay ", adapt.decay, " is outside (0, 1]");
    total_slots_ = std::clamp<int64_t>(total_slots, 0, (int64_t)n_layers * n_experts);
    slot_expert_.assign(n_layers, {});
    expert_slot_.assign(n_layers, std::vector<int>(n_experts, -1));
    counts_.assign(n_layers, std::vector<double>(n_experts, 0.0));
    passes_since_plan_.assign(n_layers, 0);
    seeded_.assign(n_layers, profile == nullptr);
    arriving_.assign(n_layers, std::vector<char>(n_experts, 0));

    // Residents per layer, in slot order.
    std::vector<std::vector<int>> chosen(n_layers);
    if (profile) {
        STRATA_CHECK(profile->n_layers() == n_layers && profile->n_experts() == n_experts, "routing profile has ",
                     profile->n_layers(), " layers × ", profile->n_experts(), " experts; the model has ", n_layers,
                     " × ", n_experts);
        prior_share_.assign((size_t)n_layers * n_experts, 0.0);
        for (int l = 0; l < n_layers; ++l) {
            const double total = profile->layer_total(l);
            for (int e = 0; e < n_experts; ++e)
                prior_share_[(size_t)l * n_experts + e] = total > 0 ? profile->count(l, e) / total : 0.0;
        }
        std::vector<int64_t> order((size_t)n_layers * n_experts);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(),
                         [&](int64_t a, int64_t b) { return prior_share_[a] > prior_share_[b]; });
        for (int64_t i = 0; i < total_slots_; ++i) chosen[order[i] / n_experts].push_back((int)(order[i] % n_experts));
    } else {
        for (int l = 0; l < n_layers; ++l) {
            const int64_t n = total_slots_ / n_layers + (l < total_slots_ % n_layers ? 1 : 0);
            for (int e = 0; e < n; ++e) chosen[l].push_back(e);
        }
    }
    for (int l = 0; l < n_layers; ++l) {
        slot_expert_[l] = chosen[l];
        for (int s = 0; s < (int)chosen[l].size(); ++s) expert_slot_[l][chosen[l][s]] = s;
    }
}

int ExpertCache::record(int layer, const int32_t* ids, int n) {
    STRATA_CHECK(layer >= 0 && layer < n_layers_, "expert cache: layer ", layer, " is outside 0..", n_layers_ - 1);
    std::vector<double>& c = counts_[layer];
    if (!seeded_[layer]) {
        // The profile seeds the counts at the size one pass of this width keeps in steady state, so it weighs
        // as much as the recent routing does and fades like it.
        const double scale = n / (1.0 - std::min(adapt_.decay, 0.999));
        for (int e = 0; e < n_experts_; ++e) c[e] = prior_share_[(size_t)layer * n_experts_ + e] * scale;
        seeded_[layer] = true;
    }
    for (double& v : c) v *= adapt_.decay;
    int hits = 0;
    for (int i = 0; i < n; ++i) {
        STRATA_CHECK(ids[i] >= 0 && ids[i] < n_experts_, "expert cache: expert ", ids[i], " is outside 0..",
                     n_experts_ - 1);
        hits += expert_slot_[layer][ids[i]] >= 0;
        c[ids[i]] += 1.0;
    }
    hits_ += hits;
    lookups_ += n;
    ++passes_since_plan_[layer];
    return hits;
}

std::vector<CacheMove> ExpertCache::plan_moves(int layer) {
    std::vector<CacheMove> moves;
    if (adapt_.every_passes <= 0 || passes_since_plan_[layer] < adapt_.every_passes) return moves;
    passes_since_plan_[layer] = 0;
    const std::vector<double>& c = counts_[layer];
    std::vector<int> missing, residents;   // residents by slot
    for (int e = 0; e < n_experts_; ++e)
        if (expert_slot_[layer][e] < 0 && !arriving_[layer][e] && c[e] > 0) missing.push_back(e);
    for (int s = 0; s < slots(layer); ++s)
        if (slot_expert_[layer][s] >= 0) residents.push_back(s);
    // Most-routed missing first (lower id on ties); least-routed residents first (lower slot on ties). Only the
    // first max_moves of each are used: a partial sort (the ties broken by id and slot, so the same order as a
    // stable sort of the whole lists; every layer plans on the same pass, so this is on the host's pass boundary).
    const size_t want = (size_t)std::max(adapt_.max_moves, 0);
    const auto by_count = [&](int a, int b) { return c[a] > c[b] || (c[a] == c[b] && a < b); };
    const auto by_resident = [&](int a, int b) {
        const double ca = c[slot_expert_[layer][a]], cb = c[slot_expert_[layer][b]];
        return ca < cb || (ca == cb && a < b);
    };
    std::partial_sort(missing.begin(), missing.begin() + std::min(want, missing.size()), missing.end(), by_count);
    std::partial_sort(residents.begin(), residents.begin() + std::min(want, residents.size()), residents.end(),
                      by_resident);
    for (size_t i = 0; i < missing.size() && i < residents.size() && (int)moves.size() < adapt_.max_moves; ++i) {
        const int in = missing[i], slot = residents[i], out = slot_expert_[layer][slot];
        if (c[in] < c[out] + adapt_.min_gain) break;
        moves.push_back(CacheMove{layer, slot, out, in});
        slot_expert_[layer][slot] = -1;
        expert_slot_[layer][out] = -1;
        arriving_[layer][in] = 1;
        ++in_flight_;
    }
    return moves;
}

void ExpertCache::finish_move(const CacheMove& m) {
    STRATA_ASSERT(arriving_[m.layer][m.new_expert] && slot_expert_[m.layer][m.slot] == -1);
    arriving_[m.layer][m.new_expert] = 0;
    slot_expert_[m.layer][m.slot] = m.new_expert;
    expert_slot_[m.layer][m.new_expert] = m.slot;
    --in_flight_;
    ++moves_done_;
}

}  // namespace strata
