// The shared expert's tail in one kernel (kernels/shared_expert.cu), for CudaBackend::shared_expert: the gate's
// dot product, its sigmoid and the add into y, in place of matmul(shexp_gate_inp) + unary(sigmoid) + hyper_inject.
#pragma once
#include <cuda_runtime.h>

namespace strata::cuda {

// y[t, j] += σ(u[t] · g) · sh[t, j] for t < T, j < H. u, sh, y [T, H]; g [H] (f32 weights); one block per token.
void shexp_gated_add(cudaStream_t s, const float* u, const float* g, const float* sh, int T, int H, float* y);

}  // namespace strata::cuda
