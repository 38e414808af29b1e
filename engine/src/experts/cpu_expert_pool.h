// The CPU side of the hybrid MoE path: computes the routed experts the GPU's cache does not hold, from host memory,
// with the quant kernels of quant/ on its own thread pool (--cpu-workers), while the GPU computes the cached ones.
// The arithmetic is CpuBackend::moe_experts' own (backend/cpu/moe_cpu.h): one implementation for both.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/cpu/moe_cpu.h"
#include "backend/cpu/thread_pool.h"
#include "model/weights.h"

namespace strata {

class CpuExpertPool {
public:
    CpuExpertPool(int n_workers, bool f32_activations);
    int workers() const { return pool_.size(); }

    // out[i] = down_e(silu(gate_e · x[t]) ⊙ (up_e · x[t])) for pairs[i] = (t, e); x [*, H], out [pairs, H].
    // gate, up, down: one layer's 3-D expert tensors ({H, I, E}, {H, I, E}, {I, H, E}) whose data is host memory.
    // Each expert's rows are read once for all the tokens it serves.
    void compute(const Weight& gate, const Weight& up, const Weight& down, const float* x,
                 const std::vector<ExpertPair>& pairs, float* out);

    // Reads every cache line of the experts' gate, up and down matrices on the workers (one load a line), so that a
    // compute() over them soon after finds their bytes in the caches instead of DRAM. Used by cpu_pool_bench --warm
    // (bench/results/2026-12-05-vm-cpu-warm/: compute 1.4-1.5x faster after it); the hybrid path does not call it.
    void warm(const Weight& gate, const Weight& up, const Weight& down, const std::vector<int>& experts);

    // dst[0, bytes) = src[0, bytes), split across the workers (filling pinned memory from the mapped file).
    void copy(void* dst, const void* src, size_t bytes);

    double seconds() const { return seconds_; }          // wall time spent in compute() so far
    int64_t pairs_done() const { return pairs_done_; }
    const double* phase_seconds() const { return scratch_.phase_seconds; }   // see MoeScratch

private:
    ThreadPool pool_;
    MoeScratch scratch_;   // compute() is called from one thread at a time
    bool f32_;
    double seconds_ = 0;
    uint64_t warm_sink_ = 0;   // keeps warm()'s loads
    int64_t pairs_done_ = 0;
};

}  // namespace strata
