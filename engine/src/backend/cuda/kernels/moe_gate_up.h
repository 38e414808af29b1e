// The routed experts' gate and up projections with swiglu as one kernel (kernels/matmul.cu, matmul_q8.cuh), for the
// moe_experts paths to use in place of matmul(gate) + matmul(up) + swiglu: one launch instead of three.
#pragma once
#include <cuda_runtime.h>

#include "backend/cuda/kernels/kernels.h"

namespace strata::cuda {

// h[p, r] = silu(gate_p[r] · x) · (up_p[r] · x) for p < P, the same as matmul(gate), matmul(up) and swiglu. gate and
// up: the same type, shapes, ids (device) and act_div; act: x quantized for that type (quantize_act). Returns false,
// launching nothing, when it does not apply (f32 activations, F32/F16/BF16 weights, differing arguments).
bool moe_gate_up(cudaStream_t s, const MatmulArgs& gate, const MatmulArgs& up, ActQ8 act, int P, float* h);

}  // namespace strata::cuda
