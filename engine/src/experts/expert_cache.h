// The GPU expert cache's policy, without CUDA: which (layer, expert) pairs sit in slots, how many slots there are
// (--expert-cache auto|N-slots|N-GiB, --vram-reserve-mib, --gpu-experts-max), the initial fill (a routing profile,
// or even shares per layer by expert id), decayed routing counts, the moves that adapt it, and hit counters.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "experts/routing_profile.h"

namespace strata {

// The value of --expert-cache: "auto", "N-slots" or "N-GiB" (N may have a fraction for GiB).
struct CacheSize {
    enum class Kind { automatic, slots, bytes };
    Kind kind = Kind::automatic;
    double value = 0;   // slots, or bytes
};
CacheSize parse_cache_size(const std::string& text);

// The slot count for a size: auto takes (free − reserve) / expert_bytes; an explicit size must fit in free − reserve.
// The result is capped by max_slots (−1 = no cap, --gpu-experts-max) and by the number of experts.
int64_t resolve_cache_slots(const CacheSize& size, size_t expert_bytes, size_t free_bytes, size_t reserve_bytes,
                            int64_t total_experts, int64_t max_slots);

struct AdaptSettings {
    int every_passes = 16;       // a layer plans moves after this many passes (0 = frozen)
    double decay = 0.9;          // routing counts are multiplied by this once per pass of the layer
    int max_moves = 4;           // per layer and plan
    double min_gain = 1.0;       // a missing expert must out-count the resident it replaces by this much
};

// One planned copy: `new_expert` goes into `slot` of `layer`, replacing `old_expert` (−1 when the slot was empty).
struct CacheMove {
    int layer = 0, slot = 0, old_expert = -1, new_expert = -1;
};

class ExpertCache {
public:
    // total_slots over n_layers × n_experts. With a profile, the slots go to the most-routed pairs overall (by each
    // layer's share of its routings); without one, evenly per layer (the first layers take the remainder) to the
    // lowest expert ids. Each layer keeps its slot count for good; adaptation moves experts within a layer.
    ExpertCache(int n_layers, int n_experts, int64_t total_slots, const RoutingProfile* profile, AdaptSettings adapt);

    int n_layers() const { return n_layers_; }
    int n_experts() const { return n_experts_; }
    int64_t total_slots() const { return total_slots_; }
    int slots(int layer) const { return (int)slot_expert_[layer].size(); }
    // The slot holding an expert, or −1 (not resident, or its copy has not landed yet).
    int slot_of(int layer, int expert) const { return expert_slot_[layer][expert]; }
    // The expert a slot holds, or −1 (empty, or a copy into it is under way).
    int expert_in(int layer, int slot) const { return slot_expert_[layer][slot]; }

    // One pass of a layer: ids are the n routed expert ids (all tokens). Counts look-ups and hits, decays the
    // layer's counts once and adds one per routing. Returns the hits.
    int record(int layer, const int32_t* ids, int n);
    double count(int layer, int expert) const { return counts_[layer][expert]; }

    // After every `every_passes` passes of the layer: the most-routed missing experts replace the least-routed
    // residents while the gain is at least min_gain (at most max_moves). A planned slot holds nothing until
    // finish_move. Empty when frozen, not due, or nothing gains.
    std::vector<CacheMove> plan_moves(int layer);
    void finish_move(const CacheMove& m);   // the copy landed: the new expert is resident
    int moves_in_flight() const { return in_flight_; }

    int64_t hits() const { return hits_; }
    int64_t lookups() const { return lookups_; }
    int64_t moves_done() const { return moves_done_; }

private:
    int n_layers_, n_experts_;
    int64_t total_slots_;
    AdaptSettings adapt_;
    std::vector<std::vector<int>> slot_expert_;    // [layer][slot] → expert or −1
    std::vector<std::vector<int>> expert_slot_;    // [layer][expert] → slot or −1
    std::vector<std::vector<double>> counts_;      // decayed routing counts
    std::vector<int> passes_since_plan_;
    std::vector<double> prior_share_;              // [layer·E + e]: the profile's share, seeds the counts
    std::vector<bool> seeded_;
    std::vector<std::vector<char>> arriving_;     // [layer][expert]: a copy into a slot is under way
    int in_flight_ = 0;
    int64_t hits_ = 0, lookups_ = 0, moves_done_ = 0;
};

}  // namespace strata
