// The shared expert's tail: sigmoid gate from u · shexp_gate_inp and the gated add into y, one block per token.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/shared_expert.h"

namespace strata::cuda {

namespace {

__global__ void shexp_gated_add_kernel(const float* u, const float* g, const float* sh, int H, float* y) {
    const size_t t = blockIdx.x;
    const float* ut = u + t * H;
    float d = 0.0f;
    for (int j = threadIdx.x; j < H; j += blockDim.x) d += ut[j] * g[j];
    d = block_sum(d);
    const float s = 1.0f / (1.0f + expf(-d));   // as unary(sigmoid)
    for (int j = threadIdx.x; j < H; j += blockDim.x) y[t * H + j] += s * sh[t * H + j];
}

}  // namespace

void shexp_gated_add(cudaStream_t s, const float* u, const float* g, const float* sh, int T, int H, float* y) {
    if (T == 0) return;
    shexp_gated_add_kernel<<<T, 256, 0, s>>>(u, g, sh, H, y);
    CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
