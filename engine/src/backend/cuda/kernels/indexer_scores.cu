// indexer_scores: s[b] = scale · Σ_h relu(q_h · kb[b]) for the QSA block selection; one warp per block key b (its
// values in registers, the query's heads in shared memory), and a grid row per query for the batched form.
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace strata::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kMaxDiPerLane = 8;      // di <= 256
constexpr int kMaxQFloats = 8192;     // ni · di of one query in shared memory (32 KiB)

// Query t = blockIdx.y scores blocks b < nb(t): nb0 without positions, else min((pos[t] + 1) / cr, stride).
__global__ void __launch_bounds__(kWarps * 32)
indexer_scores_kernel(const float* q, const float* kb, int nb0, const int32_t* pos, int cr, int ni, int di,
                      float scale, float* out, int stride) {
    extern __shared__ float s_q[];     // [ni · di]
    const int t = blockIdx.y, lane = threadIdx.x & 31;
    const int nb = pos ? min((pos[t] + 1) / cr, stride) : nb0;
    const int b = blockIdx.x * kWarps + (threadIdx.x >> 5);
    if ((int)blockIdx.x * kWarps >= nb) return;      // the whole block is past this query's blocks
    const float* qt = q + (size_t)t * ni * di;
    for (int i = threadIdx.x; i < ni * di; i += blockDim.x) s_q[i] = qt[i];
    __syncthreads();
    if (b >= nb) return;
    float k[kMaxDiPerLane];
#pragma unroll
    for (int e = 0; e < kMaxDiPerLane; ++e) {
        const int j = lane + 32 * e;
        k[e] = j < di ? kb[(size_t)b * di + j] : 0.0f;
    }
    float acc = 0.0f;
    for (int h = 0; h < ni; ++h) {
        const float* qh = s_q + h * di;
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < kMaxDiPerLane; ++e) {
            const int j = lane + 32 * e;
            if (j < di) d += qh[j] * k[e];
        }
        acc += fmaxf(warp_sum(d), 0.0f);
    }
    if (lane == 0) out[(size_t)t * stride + b] = scale * acc;
}

void launch(cudaStream_t s, const float* q, const float* kb, int T, int nb_max, int nb0, const int32_t* pos, int cr,
            int ni, int di, float scale, float* out, int stride) {
    STRATA_CHECK(di >= 1 && di <= 32 * kMaxDiPerLane, "cuda indexer_scores: head dim ", di, " is out of range 1..",
                 32 * kMaxDiPerLane);
    STRATA_CHECK(ni >= 1 && ni * di <= kMaxQFloats, "cuda indexer_scores: ", ni, " heads of ", di,
                 " exceed the shared-memory query of ", kMaxQFloats, " floats");
    if (T <= 0 || nb_max <= 0) return;
    const dim3 grid(grid_for((size_t)nb_max, kWarps), (unsigned)T);
    indexer_scores_kernel<<<grid, kWarps * 32, (size_t)ni * di * sizeof(float), s>>>(q, kb, nb0, pos, cr, ni, di,
                                                                                    scale, out, stride);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void indexer_scores(cudaStream_t s, const float* q, const float* kb, int nb, int ni, int di, float scale, float* out) {
    launch(s, q, kb, 1, nb, nb, nullptr, 0, ni, di, scale, out, 0);
}

void indexer_scores_rows(cudaStream_t s, const float* q, const float* kb, int T, const int32_t* pos, int cr, int ni,
                         int di, float scale, float* out, int stride) {
    STRATA_CHECK(cr > 0 && stride > 0 && pos, "cuda indexer_scores_rows: compress ratio ", cr, ", score rows of ",
                 stride);
    launch(s, q, kb, T, stride, 0, pos, cr, ni, di, scale, out, stride);
}

}  // namespace strata::cuda
