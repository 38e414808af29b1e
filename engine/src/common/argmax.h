// The greedy choice of a logits row, shared by the sampler, the generator and the CPU backend's argmax op.
#pragma once
#include <cstdint>

namespace strata {

// Index of the largest value, the lowest index among equal ones, NaN skipped (0 when every value is NaN): the same as
// the sampler's top_candidates(…, 1, …) without penalties. A vocabulary row of 248K values in ~30 µs (per-block
// maxima the compiler vectorises, then the first block holding the maximum), where the candidate heap took ~200 µs.
int32_t argmax_first(const float* v, int n);

}  // namespace strata
