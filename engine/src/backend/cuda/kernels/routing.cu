// MoE routing on the device: softmax over the E router logits of a token, top-k, renormalised weights. One warp per
// token; k rounds of a warp argmax (largest p, then smallest index). When the k-th value is tied with an expert left
// out, one thread redoes the choice with torch.topk's own steps (model/topk_exact.h) so exact ties go as on the CPU.
#include <climits>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"
#include "common/error.h"
#include "model/topk_exact.h"

namespace strata::cuda {

namespace {

__global__ void route_topk_kernel(const float* logits, int E, int k, int32_t* ids, float* weights) {
    extern __shared__ float smem[];
    float* p = smem;                                                   // [E] probabilities
    topk_exact::Elem* q = reinterpret_cast<topk_exact::Elem*>(p + E);  // [E] scratch of the exact path
    int32_t* sel = reinterpret_cast<int32_t*>(q + E);                  // [k] chosen experts
    unsigned char* taken = reinterpret_cast<unsigned char*>(sel + k);  // [E]
    const int t = blockIdx.x, lane = threadIdx.x;
    const float* l = logits + (size_t)t * E;

    // The CPU's arithmetic: p = exp(l − max) / Σ exp(l − max)
    float mx = -INFINITY;
    for (int i = lane; i < E; i += 32) {
        p[i] = l[i];
        mx = fmaxf(mx, p[i]);
        taken[i] = 0;
    }
    mx = warp_max(mx);
    float sum = 0;
    for (int i = lane; i < E; i += 32) {
        p[i] = expf(p[i] - mx);
        sum += p[i];
    }
    sum = warp_sum(sum);
    for (int i = lane; i < E; i += 32) p[i] = p[i] / sum;
    __syncwarp();

    for (int j = 0; j < k; ++j) {
        float bv = -INFINITY;
        int bi = INT_MAX;
        for (int i = lane; i < E; i += 32)
            if (!taken[i] && (bi == INT_MAX || p[i] > bv)) { bv = p[i]; bi = i; }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (oi != INT_MAX && (bi == INT_MAX || ov > bv || (ov == bv && oi < bi))) { bv = ov; bi = oi; }
        }
        if (lane == 0) {
            sel[j] = bi;
            taken[bi] = 1;
        }
        __syncwarp();
    }

    // Is the k-th value shared with an expert left out? Then the tie rule decides: torch.topk's steps.
    const float vk = p[sel[k - 1]];
    int equal = 0;
    for (int i = lane; i < E; i += 32) equal += p[i] == vk && !taken[i];
    equal = (int)warp_sum((float)equal);
    if (equal > 0 && lane == 0) topk_exact::topk(p, E, k, q, sel);
    __syncwarp();

    if (lane == 0) {
        float top = 0;
        for (int j = 0; j < k; ++j) top += p[sel[j]];
        for (int j = 0; j < k; ++j) {
            ids[(size_t)t * k + j] = sel[j];
            weights[(size_t)t * k + j] = p[sel[j]] / top;
        }
    }
}

}  // namespace

void route_topk(cudaStream_t s, const float* logits, int T, int E, int k, int32_t* ids, float* weights) {
    const size_t smem = (size_t)E * (sizeof(float) + sizeof(topk_exact::Elem) + 1) + (size_t)k * sizeof(int32_t);
    STRATA_CHECK(k >= 1 && k <= E, "cuda route_topk: k = ", k, " for ", E, " experts");
    STRATA_CHECK(smem <= 48 * 1024, "cuda route_topk: ", E, " experts need ", smem, " bytes of shared memory (max 49152)");
    if (T <= 0) return;
    route_topk_kernel<<<T, 32, smem, s>>>(logits, E, k, ids, weights);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace strata::cuda
