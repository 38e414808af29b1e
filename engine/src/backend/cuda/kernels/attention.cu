// attention: softmax attention of each query over its kept key cells (GQA). One block of 4 warps per (query, head);
// each warp runs an online softmax over every 4th cell with the head's values spread over its lanes, then the four
// partial results are merged. (Long contexts at T = 1 would want the cells split over several blocks: next step.)
#include <cfloat>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace strata::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kMaxHd = 256;

template <int E>   // values per lane: hd <= 32·E
__global__ void __launch_bounds__(kWarps * 32)
attention_kernel(const float* q, const float* K, const float* V, int nh, int nkv, int hd, const int32_t* off,
                 const int32_t* cells, int n0, float* o) {
    __shared__ float s_m[kWarps], s_l[kWarps], s_acc[kWarps][kMaxHd];
    const int th = blockIdx.x, t = th / nh, h = th % nh, kvh = h / (nh / nkv);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float scale = 1.0f / sqrtf((float)hd);
    const size_t kv_row = (size_t)nkv * hd;

    float qv[E], acc[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
        const int j = lane + 32 * e;
        qv[e] = j < hd ? q[(size_t)th * hd + j] : 0.0f;
        acc[e] = 0.0f;
    }
    const int n_cells = cells ? off[t + 1] - off[t] : n0 + t;
    const int32_t* cl = cells ? cells + off[t] : nullptr;
    float m = -FLT_MAX, l = 0.0f;
    for (int c = warp; c < n_cells; c += kWarps) {
        const size_t p = cl ? (size_t)cl[c] : (size_t)c;
        const float* kc = K + p * kv_row + (size_t)kvh * hd;
        const float* vc = V + p * kv_row + (size_t)kvh * hd;
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) {
            const int j = lane + 32 * e;
            if (j < hd) d += qv[e] * kc[j];
        }
        d = warp_sum(d) * scale;
        const float m_new = fmaxf(m, d);
        const float corr = expf(m - m_new), pr = expf(d - m_new);
        l = l * corr + pr;
#pragma unroll
        for (int e = 0; e < E; ++e) {
            const int j = lane + 32 * e;
            acc[e] = acc[e] * corr + (j < hd ? pr * vc[j] : 0.0f);
        }
        m = m_new;
    }
    if (lane == 0) {
        s_m[warp] = m;
        s_l[warp] = l;
    }
#pragma unroll
    for (int e = 0; e < E; ++e) {
        const int j = lane + 32 * e;
        if (j < hd) s_acc[warp][j] = acc[e];
    }
    __syncthreads();
    float M = -FLT_MAX;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, s_m[w]);
    float L = 0.0f, f[kWarps];
    for (int w = 0; w < kWarps; ++w) {
        f[w] = s_l[w] > 0.0f ? expf(s_m[w] - M) : 0.0f;
        L += s_l[w] * f[w];
    }
    for (int j = threadIdx.x; j < hd; j += blockDim.x) {
        float r = 0.0f;
        for (int w = 0; w < kWarps; ++w) r += s_acc[w][j] * f[w];
        o[(size_t)th * hd + j] = r / L;
    }
}

}  // namespace

void attention(cudaStream_t s, const float* q, const float* K, const float* V, int T, int nh, int nkv, int hd,
               const int32_t* off, const int32_t* cells, int n0, float* o) {
    STRATA_CHECK(hd >= 1 && hd <= kMaxHd, "cuda attention: head dim ", hd, " is out of range 1..", kMaxHd);
    STRATA_CHECK(nkv > 0 && nh % nkv == 0, "cuda attention: ", nh, " heads do not group over ", nkv, " kv heads");
    if (!T || !nh) return;
    const unsigned blocks = (unsigned)(T * nh);
    if (hd <= 32) attention_kernel<1><<<blocks, kWarps * 32, 0, s>>>(q, K, V, nh, nkv, hd, off, cells, n0, o);
    else if (hd <= 64) attention_kernel<2><<<blocks, kWarps * 32, 0, s>>>(q, K, V, nh, nkv, hd, off, cells, n0, o);
    else if (hd <= 128) attention_kernel<4><<<blocks, kWarps * 32, 0, s>>>(q, K, V, nh, nkv, hd, off, cells, n0, o);
    else attention_kernel<8><<<blocks, kWarps * 32, 0, s>>>(q, K, V, nh, nkv, hd, off, cells, n0, o);
    CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
