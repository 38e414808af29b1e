// The routed experts on the CPU, used by the CPU backend and by the hybrid path's CPU pool: one implementation.
// All experts of a call are computed in two passes over the pool (gate/up rows of every expert, then down rows), each
// expert's rows read once for all the tokens it serves. Results do not depend on the thread count.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "model/weights.h"

namespace strata {

struct ExpertPair {
    int token = 0;    // activation row
    int expert = 0;
};

// out[i] = down_e(silu(gate_e · x[t]) ⊙ (up_e · x[t])) for pairs[i] = (t, e); x [*, H], out [pairs, H].
// gate, up, down: one layer's 3-D expert tensors ({H, I, E}, {H, I, E}, {I, H, E}) in host memory. With
// f32_activations the weights are dequantized and multiplied in f32 (the reference mode), else activations are
// quantized to each weight type's activation format.
void compute_experts_cpu(ThreadPool& pool, bool f32_activations, const Weight& gate, const Weight& up,
                         const Weight& down, const float* x, const std::vector<ExpertPair>& pairs, float* out);

}  // namespace strata
