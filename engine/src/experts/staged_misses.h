// Host-side plans of the hybrid path's staged misses (backend/cuda/hybrid_*.cu), plain C++ so CPU tests cover them:
// how many of a call's grouped misses go over PCIe to the GPU, their batches in the staging arena, and the tiles the
// tiled expert kernels run over grouped pairs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cpu/moe_cpu.h"

namespace strata {

// The first `pairs` of the misses (grouped by expert) are staged: `experts` distinct experts.
struct StagedSplit {
    int pairs = 0;
    int experts = 0;
};
// all: every miss (prompt chunks); else the first round(share × distinct) experts of the group order.
StagedSplit staged_split(const std::vector<ExpertPair>& grouped, bool all, double share);

// One batch: pairs [begin, end) of the grouped misses, `experts` distinct ones, staged together in one arena half.
struct StageBatch {
    size_t begin = 0, end = 0;
    int experts = 0;
};
// Batches of at most slots_per_batch distinct experts over grouped[0, n); slot[i] = pair i's expert's place in its
// batch (the staging slot its matmuls read).
std::vector<StageBatch> stage_batches(const std::vector<ExpertPair>& grouped, int n, int slots_per_batch,
                                      std::vector<int32_t>& slot);

// Tiles (group, first − begin, count ≤ max_pairs, 0) over pairs [begin, end) grouped in runs of equal group[i],
// appended to words as four int32 each (the int4 items of matmul_tiled_experts); returns how many.
int append_pair_tiles(const int32_t* group, size_t begin, size_t end, int max_pairs, std::vector<int32_t>& words);

}  // namespace strata
