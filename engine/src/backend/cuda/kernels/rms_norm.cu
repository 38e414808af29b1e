// rms_norm (offset-folded weight, optional) and its variant l2_norm: one block per group of `group` columns; the
// sum of squares is a block reduction, then each thread scales the values it read (safe in place). Groups of a
// multiple of 4 up to 16384 columns (a 2560-wide hidden row at T = 1) keep their values in registers as float4s.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/head_math.cuh"
#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/kernels/t1_variants.h"

namespace strata::cuda {

namespace {

// mode 0: y = x · rsqrt(mean(x²) + eps) · w; mode 1: y = x · scale / sqrt(Σx² + eps).
template <int MODE>
__global__ void norm_kernel(const float* x, const float* w, int w_len, int width, int group, float eps, float scale,
                            float* y) {
    const size_t g0 = (size_t)blockIdx.x * group;          // first element of this group (rows are whole groups)
    const int col0 = w_len > 0 ? (int)(g0 % (size_t)width) % w_len : 0;   // weight index of the group's first column
    float ss = 0.0f;
    for (int j = threadIdx.x; j < group; j += blockDim.x) ss += x[g0 + j] * x[g0 + j];
    ss = block_sum(ss);
    const float s = MODE == 0 ? 1.0f / sqrtf(ss / group + eps) : scale / sqrtf(ss + eps);
    for (int j = threadIdx.x; j < group; j += blockDim.x) {
        float v = x[g0 + j] * s;
        if (MODE == 0 && w) v *= w[(col0 + j) % w_len];
        y[g0 + j] = v;
    }
}

// The same, each thread holding up to NV float4s of the group (group % 4 == 0, 16-byte aligned rows).
template <int MODE, int NV>
__global__ void norm_vec_kernel(const float* x, const float* w, int w_len, int width, int group, float eps, float scale,
                                float* y) {
    const size_t g0 = (size_t)blockIdx.x * group;
    const int col0 = w_len > 0 ? (int)(g0 % (size_t)width) % w_len : 0;
    const float4* x4 = (const float4*)(x + g0);
    const int nv = group / 4;
    float4 v[NV];
#pragma unroll
    for (int i = 0; i < NV; ++i) {
        const int j = threadIdx.x + i * blockDim.x;
        v[i] = j < nv ? x4[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    const float ss = block_sum(sum_squares4(v));
    const float s = MODE == 0 ? 1.0f / sqrtf(ss / group + eps) : scale / sqrtf(ss + eps);
    float4* y4 = (float4*)(y + g0);
#pragma unroll
    for (int i = 0; i < NV; ++i) {
        const int j = threadIdx.x + i * blockDim.x;
        if (j >= nv) break;
        y4[j] = scale4(v[i], s, MODE == 0 ? w : nullptr, col0 + 4 * j, w_len);
    }
}

inline int threads_for(int group) { return group <= 64 ? 32 : group <= 256 ? 64 : 128; }

bool use_v1() {
    static const bool v1 = [] {
        const char* v = std::getenv("STRATA_CUDA_RMS_NORM");
        return v && std::strcmp(v, "v1") == 0;
    }();
    return v1;
}

// The float4 kernel for this group, if it applies: threads a multiple of 32 (≤ 1024) with ≤ 4 float4s each.
template <int MODE>
bool launch_vec(cudaStream_t s, const float* x, const float* w, int w_len, size_t groups, int width, int group,
                float eps, float scale, float* y) {
    const bool aligned = ((uintptr_t)x % 16 == 0) && ((uintptr_t)y % 16 == 0);
    if (use_v1() || group % 4 != 0 || group > 16384 || !aligned) return false;
    const int nv = group / 4;
    const int threads = std::min(1024, std::max(32, ((nv + 3) / 4 + 31) / 32 * 32));
    const int per = (nv + threads - 1) / threads;
    auto launch = [&](auto kernel) {
        kernel<<<(unsigned)groups, threads, 0, s>>>(x, w, w_len, width, group, eps, scale, y);
    };
    if (per <= 1) launch(norm_vec_kernel<MODE, 1>);
    else if (per <= 2) launch(norm_vec_kernel<MODE, 2>);
    else launch(norm_vec_kernel<MODE, 4>);
    CUDA_CHECK_LAUNCH();
    return true;
}

}  // namespace

void rms_norm_v1(cudaStream_t s, const float* x, const float* w, int w_len, int rows, int width, int group, float eps,
                 float* y) {
    STRATA_CHECK(group > 0 && width % group == 0, "cuda rms_norm: width ", width, " is not a multiple of the group ", group);
    const size_t groups = (size_t)rows * (width / group);
    if (!groups) return;
    norm_kernel<0><<<(unsigned)groups, threads_for(group), 0, s>>>(x, w, w ? w_len : 0, width, group, eps, 1.0f, y);
    CUDA_CHECK_LAUNCH();
}

void rms_norm(cudaStream_t s, const float* x, const float* w, int w_len, int rows, int width, int group, float eps,
              float* y) {
    STRATA_CHECK(group > 0 && width % group == 0, "cuda rms_norm: width ", width, " is not a multiple of the group ", group);
    const size_t groups = (size_t)rows * (width / group);
    if (!groups) return;
    if (launch_vec<0>(s, x, w, w ? w_len : 0, groups, width, group, eps, 1.0f, y)) return;
    norm_kernel<0><<<(unsigned)groups, threads_for(group), 0, s>>>(x, w, w ? w_len : 0, width, group, eps, 1.0f, y);
    CUDA_CHECK_LAUNCH();
}

void l2_norm(cudaStream_t s, const float* x, int rows, int width, int group, float eps, float scale, float* y) {
    STRATA_CHECK(group > 0 && width % group == 0, "cuda l2_norm: width ", width, " is not a multiple of the group ", group);
    const size_t groups = (size_t)rows * (width / group);
    if (!groups) return;
    if (launch_vec<1>(s, x, nullptr, 0, groups, width, group, eps, scale, y)) return;
    norm_kernel<1><<<(unsigned)groups, threads_for(group), 0, s>>>(x, nullptr, 0, width, group, eps, scale, y);
    CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
