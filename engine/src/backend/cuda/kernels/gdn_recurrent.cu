// gdn_recurrent: the Gated DeltaNet recurrence token by token. One block per value head, one thread per state
// column j (dv threads); the column S[:, j] (dk values) stays in registers for the whole call.
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace strata::cuda {

namespace {

template <int DK>
__global__ void gdn_kernel(const float* q, const float* k, const float* v, const float* g, const float* beta, int T,
                           int nk, int nv, int dk, int dv, float* S, float* o) {
    __shared__ float qs[DK], ks[DK];
    const int h = blockIdx.x, j = threadIdx.x, kh = h % nk;
    float* Sh = S + (size_t)h * dk * dv;
    float s[DK];
#pragma unroll
    for (int i = 0; i < DK; ++i) s[i] = i < dk ? Sh[(size_t)i * dv + j] : 0.0f;
    for (int t = 0; t < T; ++t) {
        __syncthreads();                                       // previous token's q/k are no longer read
        for (int i = j; i < dk; i += blockDim.x) {
            qs[i] = q[(size_t)t * nk * dk + (size_t)kh * dk + i];
            ks[i] = k[(size_t)t * nk * dk + (size_t)kh * dk + i];
        }
        __syncthreads();
        const float decay = expf(g[(size_t)t * nv + h]);
        const float b = beta[(size_t)t * nv + h];
        float kv = 0.0f;
#pragma unroll
        for (int i = 0; i < DK; ++i)
            if (i < dk) {
                s[i] *= decay;
                kv += s[i] * ks[i];
            }
        const float delta = b * (v[(size_t)t * nv * dv + (size_t)h * dv + j] - kv);
        float out = 0.0f;
#pragma unroll
        for (int i = 0; i < DK; ++i)
            if (i < dk) {
                s[i] += ks[i] * delta;
                out += s[i] * qs[i];
            }
        o[(size_t)t * nv * dv + (size_t)h * dv + j] = out;
    }
#pragma unroll
    for (int i = 0; i < DK; ++i)
        if (i < dk) Sh[(size_t)i * dv + j] = s[i];
}

}  // namespace

void gdn_recurrent(cudaStream_t s, const float* q, const float* k, const float* v, const float* g, const float* beta,
                   int T, int nk, int nv, int dk, int dv, float* S, float* o) {
    STRATA_CHECK(dv >= 1 && dv <= 1024, "cuda gdn_recurrent: value head dim ", dv, " is out of range 1..1024");
    if (!T || !nv) return;
    if (dk <= 16) gdn_kernel<16><<<nv, dv, 0, s>>>(q, k, v, g, beta, T, nk, nv, dk, dv, S, o);
    else if (dk <= 32) gdn_kernel<32><<<nv, dv, 0, s>>>(q, k, v, g, beta, T, nk, nv, dk, dv, S, o);
    else if (dk <= 64) gdn_kernel<64><<<nv, dv, 0, s>>>(q, k, v, g, beta, T, nk, nv, dk, dv, S, o);
    else if (dk <= 128) gdn_kernel<128><<<nv, dv, 0, s>>>(q, k, v, g, beta, T, nk, nv, dk, dv, S, o);
    else fail("cuda gdn_recurrent: key head dim ", dk, " is above 128");
    CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
