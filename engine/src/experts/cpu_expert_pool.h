// The CPU side of the hybrid MoE path: computes the routed experts the GPU's cache does not hold, from host memory,
// with the quant kernels of quant/ on its own thread pool (--cpu-workers), while the GPU computes the cached ones.
// Per expert the arithmetic is CpuBackend::moe_experts' (Q8 activations, or f32 ones in the reference mode).
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

class CpuExpertPool {
public:
    CpuExpertPool(int n_workers, bool f32_activations);
    int workers() const { return pool_.size(); }

    // out[i] = down_e(silu(gate_e · x[t]) ⊙ (up_e · x[t])) for pairs[i] = (t, e); x [*, H], out [pairs, H].
    // gate, up, down: one layer's 3-D expert tensors ({H, I, E}, {H, I, E}, {I, H, E}) whose data is host memory.
    // Each expert's rows are read once for all the tokens it serves.
    void compute(const Weight& gate, const Weight& up, const Weight& down, const float* x,
                 const std::vector<ExpertPair>& pairs, float* out);

    // dst[0, bytes) = src[0, bytes), split across the workers (filling pinned memory from the mapped file).
    void copy(void* dst, const void* src, size_t bytes);

    double seconds() const { return seconds_; }          // wall time spent in compute() so far
    int64_t pairs_done() const { return pairs_done_; }

private:
    // y[r] = row r of W · x for r in [r0, r1), f32 activations (dequantized weight rows).
    static void rows_dot_f32(const Weight& w, const uint8_t* matrix, int64_t r0, int64_t r1, const float* x, float* y);
    ThreadPool pool_;
    bool f32_;
    double seconds_ = 0;
    int64_t pairs_done_ = 0;
};

}  // namespace strata
