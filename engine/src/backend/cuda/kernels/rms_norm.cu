// rms_norm (offset-folded weight, optional) and its variant l2_norm: one block per group of `group` columns; the
// sum of squares is a block reduction, then each thread scales the values it read (safe in place).
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"

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

inline int threads_for(int group) { return group <= 64 ? 32 : group <= 256 ? 64 : 128; }

}  // namespace

void rms_norm(cudaStream_t s, const float* x, const float* w, int w_len, int rows, int width, int group, float eps,
              float* y) {
    STRATA_CHECK(group > 0 && width % group == 0, "cuda rms_norm: width ", width, " is not a multiple of the group ", group);
    const size_t groups = (size_t)rows * (width / group);
    if (!groups) return;
    norm_kernel<0><<<(unsigned)groups, threads_for(group), 0, s>>>(x, w, w ? w_len : 0, width, group, eps, 1.0f, y);
    CUDA_CHECK_LAUNCH();
}

void l2_norm(cudaStream_t s, const float* x, int rows, int width, int group, float eps, float scale, float* y) {
    STRATA_CHECK(group > 0 && width % group == 0, "cuda l2_norm: width ", width, " is not a multiple of the group ", group);
    const size_t groups = (size_t)rows * (width / group);
    if (!groups) return;
    norm_kernel<1><<<(unsigned)groups, threads_for(group), 0, s>>>(x, nullptr, 0, width, group, eps, scale, y);
    CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
