// The routed experts on the CPU, used by the CPU backend and by the hybrid path's CPU pool: one implementation.
// One wake-up of the pool per call and one barrier (two with several tokens): every thread computes its share of all
// gate/up rows, waits, then its share of all down rows; each expert's rows are read once for all the tokens it
// serves. Results do not depend on the thread count.
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

// Buffers kept from call to call (grown, never shrunk), so a decode step allocates nothing.
struct MoeScratch {
    std::vector<int> order;          // pair indices sorted by (expert, index)
    std::vector<int> group_first;    // per group: its first row in order / the flat per-pair buffers
    std::vector<char> token_used;
    std::vector<uint8_t> tok_g, tok_u;            // quantized inputs per token (calls with several tokens)
    std::vector<float> gv, uv, ov;
    struct ThreadBuffers {
        std::vector<uint8_t> x_act;    // the one token of a decode call, quantized by this thread
        std::vector<uint8_t> gather;   // the inputs of a group of several tokens at a fixed stride
        std::vector<uint8_t> h_act;    // a group's quantized hidden rows
    };
    std::vector<ThreadBuffers> per_thread;
    // Seconds the calling thread spent per phase, its barrier waits included (benchmarks): input quantization,
    // gate/up rows + silu, down rows (with their hidden-row quantization).
    double phase_seconds[3] = {0, 0, 0};
};

// out[i] = down_e(silu(gate_e · x[t]) ⊙ (up_e · x[t])) for pairs[i] = (t, e); x [*, H], out [pairs, H].
// gate, up, down: one layer's 3-D expert tensors ({H, I, E}, {H, I, E}, {I, H, E}) in host memory. With
// f32_activations the weights are dequantized and multiplied in f32 (the reference mode), else activations are
// quantized to each weight type's activation format.
void compute_experts_cpu(ThreadPool& pool, bool f32_activations, const Weight& gate, const Weight& up,
                         const Weight& down, const float* x, const std::vector<ExpertPair>& pairs, float* out);
void compute_experts_cpu(ThreadPool& pool, bool f32_activations, const Weight& gate, const Weight& up,
                         const Weight& down, const float* x, const std::vector<ExpertPair>& pairs, float* out,
                         MoeScratch& scratch);

}  // namespace strata
