// QSA's heads before attention in one launch (Backend::qsa_heads): a block of 32 threads a (token, head) of the
// queries, the keys and the indexer's queries; each splits its query from the gate where it has one, RMS-norms the
// head as rms_norm's vector kernel does at that group size (one warp, 1-2 float4s a thread) and rotates it as
// rope_kernel does (head_math.cuh): the bits of deinterleave, rms_norm and rope issued one after another, in 1 launch
// instead of 7.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/head_math.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace strata::cuda {

namespace {

constexpr int kThreads = 32;   // rms_norm's vector kernel's block for groups of up to 512 columns
constexpr int kMaxNv = 4;      // float4s a thread: groups of up to 512 columns

struct HeadSet {
    const float* src;   // row t of head h at src + t·src_row + h·src_head
    float* dst;         // and dst + t·n·hd + h·hd
    float* gate;        // with the gate at src + … + hd (queries only), to gate + t·n·hd + h·hd
    const float* w;     // the norm weight, w_len values
    int n, hd, src_row, src_head, w_len;
};

template <int NV>
__global__ void __launch_bounds__(kThreads)
qsa_heads_kernel(HeadSet q, HeadSet k, HeadSet qi, float eps, int n_rot, float theta, const int32_t* pos) {
    extern __shared__ float4 row4[];   // the normed head, for the rotation's pairs
    const int t = blockIdx.y;
    int h = blockIdx.x;
    const HeadSet& set = h < q.n ? q : h < q.n + k.n ? k : qi;
    h -= h < q.n ? 0 : h < q.n + k.n ? q.n : q.n + k.n;
    const float* src = set.src + (size_t)t * set.src_row + (size_t)h * set.src_head;
    float* dst = set.dst + ((size_t)t * set.n + h) * set.hd;
    const int nv = set.hd / 4;
    const float4* x4 = reinterpret_cast<const float4*>(src);
    float4 v[NV];
#pragma unroll
    for (int i = 0; i < NV; ++i) {
        const int j = threadIdx.x + i * kThreads;
        v[i] = j < nv ? x4[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    if (set.gate) {   // the gate half of the query's row, as deinterleave copies it
        const float4* g4 = reinterpret_cast<const float4*>(src + set.hd);
        float4* gd = reinterpret_cast<float4*>(set.gate + ((size_t)t * set.n + h) * set.hd);
        for (int j = threadIdx.x; j < nv; j += kThreads) gd[j] = g4[j];
    }
    const float ss = block_sum(sum_squares4(v));
    const float s = 1.0f / sqrtf(ss / set.hd + eps);
#pragma unroll
    for (int i = 0; i < NV; ++i) {
        const int j = threadIdx.x + i * kThreads;
        if (j < nv) row4[j] = scale4(v[i], s, set.w, 4 * j, set.w_len);
    }
    __syncthreads();
    const float* row = reinterpret_cast<const float*>(row4);
    const int half = n_rot / 2;
    for (int j = threadIdx.x; j < set.hd; j += kThreads) {
        if (j < half) rope_pair(row[j], row[j + half], j, n_rot, theta, pos[t], dst + j, dst + j + half);
        else if (j >= n_rot) dst[j] = row[j];
    }
}

HeadSet head_set(const QsaHeadsArgs::Heads& a, int src_row, int src_head, float* gate) {
    return HeadSet{a.src, a.dst, gate, a.norm, a.n, a.hd, src_row, src_head, a.norm_len};
}

}  // namespace

bool qsa_heads(cudaStream_t s, const QsaHeadsArgs& a) {
    const int hd_max = a.qi.n ? std::max(a.q.hd, a.qi.hd) : a.q.hd;
    const int nv = hd_max / 4;
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    auto fits = [&](const QsaHeadsArgs::Heads& h) {
        // rms_norm's vector kernel takes 32 threads for these groups (≤ 512 columns), and each needs whole float4s
        return !h.n || (h.hd % 4 == 0 && h.hd <= 4 * kThreads * kMaxNv && h.hd >= a.n_rot && aligned(h.src) &&
                        aligned(h.dst) && h.norm && h.norm_len == h.hd);
    };
    if (a.T <= 0 || a.q.hd != a.k.hd || a.n_rot % 2 || !fits(a.q) || !fits(a.k) || !fits(a.qi) || !aligned(a.gate) ||
        a.q.src == a.q.dst)
        return false;
    const HeadSet q = head_set(a.q, a.q.n * 2 * a.q.hd, 2 * a.q.hd, a.gate);
    const HeadSet k = head_set(a.k, a.k.n * a.k.hd, a.k.hd, nullptr);
    const HeadSet qi = head_set(a.qi, a.qi.n * a.qi.hd, a.qi.hd, nullptr);
    const dim3 grid((unsigned)(a.q.n + a.k.n + a.qi.n), (unsigned)a.T);
    const size_t smem = (size_t)hd_max * sizeof(float);
    auto launch = [&](auto kernel) {
        kernel<<<grid, kThreads, smem, s>>>(q, k, qi, a.eps, a.n_rot, a.theta, a.pos);
    };
    if (nv <= kThreads) launch(qsa_heads_kernel<1>);
    else if (nv <= 2 * kThreads) launch(qsa_heads_kernel<2>);
    else launch(qsa_heads_kernel<4>);
    CUDA_CHECK_LAUNCH();
    return true;
}

}  // namespace strata::cuda
