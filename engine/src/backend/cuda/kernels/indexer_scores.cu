// indexer_scores: s[b] = scale · Σ_h relu(q_h · kb[b]) for the QSA block selection; one warp per block key b.
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace strata::cuda {

namespace {

__global__ void indexer_scores_kernel(const float* q, const float* kb, int nb, int ni, int di, float scale, float* out) {
    const int b = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (b >= nb) return;
    const float* kr = kb + (size_t)b * di;
    float acc = 0.0f;
    for (int h = 0; h < ni; ++h) {
        float d = 0.0f;
        for (int j = lane; j < di; j += 32) d += q[(size_t)h * di + j] * kr[j];
        acc += fmaxf(warp_sum(d), 0.0f);
    }
    if (lane == 0) out[b] = scale * acc;
}

}  // namespace

void indexer_scores(cudaStream_t s, const float* q, const float* kb, int nb, int ni, int di, float scale, float* out) {
    if (nb <= 0) return;
    indexer_scores_kernel<<<grid_for((size_t)nb, 4), 128, 0, s>>>(q, kb, nb, ni, di, scale, out);
    CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
