// The routed and shared experts at decode sizes in few launches (kernels/matmul.cu, matmul_q8.cuh, moe_decode.cuh):
// gate+up+swiglu as one kernel, and the two-launch decode path (gate+up+swiglu+quantize h, down+weighted sum).
#pragma once
#include <cstddef>

#include <cuda_runtime.h>

#include "backend/cuda/kernels/kernels.h"

namespace strata::cuda {

// h[p, r] = silu(gate_p[r] · x) · (up_p[r] · x) for p < P, the same as matmul(gate), matmul(up) and swiglu. gate and
// up: the same type, shapes, ids (device) and act_div; act: x quantized for that type (quantize_act). Returns false,
// launching nothing, when it does not apply (f32 activations, F32/F16/BF16 weights, differing arguments).
bool moe_gate_up(cudaStream_t s, const MatmulArgs& gate, const MatmulArgs& up, ActQ8 act, int P, float* h);

// The decode path takes at most this many (token, expert) pairs: a speculation verify window of up to 5 tokens ×
// (top-10 + the shared expert), each pair computed as at one token (more go to the grouped kernels, which were
// 176 µs a layer for a window of 4 on an H100 against ~40 here: bench/results/2026-12-05-h100-verify).
constexpr int kMoeDecodeMaxPairs = 64;

// The shared expert as extra pairs of a decode launch (moe_decode.cuh): pair P + t is token t's, through one matrix
// each; its weight is σ(x[t] · gvec) (gvec [n] f32 on the device). gate null: no shared pairs.
struct SharedPairs {
    const uint8_t* gate = nullptr;
    const uint8_t* up = nullptr;
    const uint8_t* down = nullptr;
    const float* gvec = nullptr;
};

// Whether moe_decode / shexp_decode take these matrices for P pairs: integer gate/up formats, a down format
// multiplied with Q8_0 activations (ABLK 32: Q2_0, IQ4_NL, Q4_0, Q8_0, ...), I = gate.rows = down.n a multiple of
// 32, gate/up alike, gate.ids == up.ids == down.ids, 0 < P ≤ kMoeDecodeMaxPairs, and STRATA_CUDA_MOE_DECODE not 0.
bool moe_decode_supported(const MatmulArgs& gate, const MatmulArgs& up, const MatmulArgs& down, int P);
// Scratch bytes (device) that moe_decode / shexp_decode need for P pairs of I hidden values: 1.125·P·I + 4·P + 16.
size_t moe_decode_scratch_bytes(int P, int I);

// Routed experts in two launches: y[t] = Σ_j wts[t·k + j] · down_p(h_p), h_p = silu(gate_p · x) ⊙ (up_p · x),
// p = t·k + j, matrices ids[p] (gate.ids == up.ids == down.ids, gate.act_div == k), h quantized to Q8_0 as the CPU
// path does. y is written (no separate combine). act: x [T, n] quantized for gate's type (quantize_act), or act.q
// null: the gate/up kernel quantizes x itself (the same bits; one launch fewer, each block re-reads x).
void moe_decode(cudaStream_t s, const MatmulArgs& gate, const MatmulArgs& up, const MatmulArgs& down, ActQ8 act,
                const float* x, const float* wts, int T, int k, void* scratch, size_t scratch_bytes, float* y);

// The shared expert in two launches: y[t] += σ(x[t] · gvec) · down(silu(gate · x[t]) ⊙ (up · x[t])); one matrix each
// (no ids, act_div 1), gvec [n] f32 on the device; act: x quantized for gate's type, or act.q null as moe_decode.
void shexp_decode(cudaStream_t s, const MatmulArgs& gate, const MatmulArgs& up, const MatmulArgs& down, ActQ8 act,
                  const float* x, const float* gvec, int T, void* scratch, size_t scratch_bytes, float* y);

// Routed and shared experts together in moe_decode's two launches: y[t] = Σ_j wts[t·k + j] · down_p(h_p) +
// σ(x[t] · gvec) · sdown(silu(sgate · x[t]) ⊙ (sup · x[t])): the shared expert is one more pair of each token, its term
// added inside the down kernel's sum (an order of additions other than moe_decode then shexp_decode: not the same
// bits, within the same rounding). The shared matrices must have the routed ones' formats and shapes; scratch as
// moe_decode_scratch_bytes(T · (k + 1), I).
bool moe_shexp_decode_supported(const MatmulArgs& gate, const MatmulArgs& up, const MatmulArgs& down,
                                const MatmulArgs& sgate, const MatmulArgs& sup, const MatmulArgs& sdown, int T, int k);
void moe_shexp_decode(cudaStream_t s, const MatmulArgs& gate, const MatmulArgs& up, const MatmulArgs& down,
                      const MatmulArgs& sgate, const MatmulArgs& sup, const MatmulArgs& sdown, const float* gvec,
                      ActQ8 act, const float* x, const float* wts, int T, int k, void* scratch, size_t scratch_bytes,
                      float* y);

}  // namespace strata::cuda
