// MoE routing on the device: softmax over the E router logits of a token, top-k, renormalised weights. One warp per
// token; k rounds of a warp argmax (largest p, then smallest index). When the k-th value is tied with an expert left
// out, one thread redoes the choice with torch.topk's own steps (model/topk_exact.h) so exact ties go as on the CPU.
// E ≤ 1024: the probabilities stay in registers and a round is two warp reductions (redux.sync); larger E (and
// STRATA_CUDA_ROUTE_TOPK=v1) take the first kernel, which rescans shared memory each round.
#include <climits>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/kernels/t1_variants.h"
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

// Lane holds p of experts lane + 32·i (i < VPL) in registers. Key of a candidate: bits(p) + 1 (p ≥ 0, so the bits order
// as the values), 0 when taken or past E: the largest key is the largest p, and among equal keys the smallest index
// wins, as in the kernel above. The arithmetic of p and of the weights is that kernel's too.
//
// One token's routing by one warp (the lanes of threads 0-31): l its E logits, smem (E floats + E Elems + k ints) of
// the calling block; ids / weights its k.
template <int VPL>
__device__ __forceinline__ void route_topk_warp(const float* l, int E, int k, float* smem, int32_t* ids,
                                                float* weights) {
    float* ps = smem;                                                  // [E] for the exact path
    topk_exact::Elem* q = reinterpret_cast<topk_exact::Elem*>(ps + E);
    int32_t* sel = reinterpret_cast<int32_t*>(q + E);                  // [k]
    const int lane = threadIdx.x & 31;

    float p[VPL];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < VPL; ++i) {
        const int e = lane + 32 * i;
        p[i] = e < E ? __ldcg(l + e) : -INFINITY;
        mx = fmaxf(mx, p[i]);
    }
    mx = warp_max(mx);
    float sum = 0;
#pragma unroll
    for (int i = 0; i < VPL; ++i)
        if (lane + 32 * i < E) {
            p[i] = expf(p[i] - mx);
            sum += p[i];
        }
    sum = warp_sum(sum);
    unsigned live = 0;   // bit i: expert lane + 32·i exists and is not taken
#pragma unroll
    for (int i = 0; i < VPL; ++i)
        if (lane + 32 * i < E) {
            p[i] = p[i] / sum;
            ps[lane + 32 * i] = p[i];
            live |= 1u << i;
        }

    // The lane's best candidate: largest key, lowest i on equal keys.
    const auto local_best = [&](unsigned& key, int& idx) {
        key = 0;
        idx = INT_MAX;
#pragma unroll
        for (int i = 0; i < VPL; ++i) {
            const unsigned ki = (live >> i) & 1u ? __float_as_uint(p[i]) + 1u : 0u;
            if (ki > key) { key = ki; idx = lane + 32 * i; }
        }
    };
    unsigned key;
    int idx;
    local_best(key, idx);
    float top = 0;
    for (int j = 0; j < k; ++j) {
        const unsigned best = __reduce_max_sync(0xffffffffu, key);
        const int bi = (int)__reduce_min_sync(0xffffffffu, key == best ? (unsigned)idx : (unsigned)INT_MAX);
        top += __uint_as_float(best - 1u);
        if (lane == 0) sel[j] = bi;
        if (bi == idx) {   // the winner's lane
            live &= ~(1u << (bi / 32));
            local_best(key, idx);
        }
    }
    __syncwarp();

    // Is the k-th value shared with an expert left out? Then the tie rule decides: torch.topk's steps.
    const float vk = ps[sel[k - 1]];
    int equal = 0;
#pragma unroll
    for (int i = 0; i < VPL; ++i) equal += (live >> i) & 1u && p[i] == vk;
    equal = __reduce_add_sync(0xffffffffu, (unsigned)equal);
    if (equal > 0) {
        if (lane == 0) topk_exact::topk(ps, E, k, q, sel);
        __syncwarp();
        top = 0;
        for (int j = 0; j < k; ++j) top += ps[sel[j]];
    }
    for (int j = lane; j < k; j += 32) {
        ids[j] = sel[j];
        weights[j] = ps[sel[j]] / top;
    }
}

template <int VPL>
__global__ void __launch_bounds__(32)
route_topk_reg_kernel(const float* logits, int E, int k, int32_t* ids, float* weights) {
    extern __shared__ float smem[];
    pdl_launch_dependents();
    pdl_wait();
    logits = pdl_dep(logits);
    const int t = blockIdx.x;
    route_topk_warp<VPL>(logits + (size_t)t * E, E, k, smem, ids + (size_t)t * k, weights + (size_t)t * k);
}

// fn(std::integral_constant<int, V>{}) for the smallest V in 1, 2, 4, …, 32 holding n values a lane (n ≤ 32).
template <class Fn>
void with_values_per_lane(int n, Fn&& fn) {
    if (n <= 1) fn(std::integral_constant<int, 1>{});
    else if (n <= 2) fn(std::integral_constant<int, 2>{});
    else if (n <= 4) fn(std::integral_constant<int, 4>{});
    else if (n <= 8) fn(std::integral_constant<int, 8>{});
    else if (n <= 16) fn(std::integral_constant<int, 16>{});
    else fn(std::integral_constant<int, 32>{});
}

bool use_v1() {
    static const bool v1 = [] {
        const char* v = std::getenv("STRATA_CUDA_ROUTE_TOPK");
        return v && std::strcmp(v, "v1") == 0;
    }();
    return v1;
}

}  // namespace

void route_topk_v1(cudaStream_t s, const float* logits, int T, int E, int k, int32_t* ids, float* weights) {
    const size_t smem = (size_t)E * (sizeof(float) + sizeof(topk_exact::Elem) + 1) + (size_t)k * sizeof(int32_t);
    STRATA_CHECK(k >= 1 && k <= E, "cuda route_topk: k = ", k, " for ", E, " experts");
    STRATA_CHECK(smem <= 48 * 1024, "cuda route_topk: ", E, " experts need ", smem, " bytes of shared memory (max 49152)");
    if (T <= 0) return;
    route_topk_kernel<<<T, 32, smem, s>>>(logits, E, k, ids, weights);
    CUDA_CHECK(cudaGetLastError());
}

void route_topk(cudaStream_t s, const float* logits, int T, int E, int k, int32_t* ids, float* weights) {
    if (E > 1024 || use_v1()) return route_topk_v1(s, logits, T, E, k, ids, weights);
    STRATA_CHECK(k >= 1 && k <= E, "cuda route_topk: k = ", k, " for ", E, " experts");
    if (T <= 0) return;
    const size_t smem = (size_t)E * (sizeof(float) + sizeof(topk_exact::Elem)) + (size_t)k * sizeof(int32_t);
    with_values_per_lane((E + 31) / 32, [&](auto vpl) {
        launch_kernel(route_topk_reg_kernel<decltype(vpl)::value>, T, 32, smem, s, pdl_enabled(), logits, E, k, ids,
                      weights);
    });
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace strata::cuda
