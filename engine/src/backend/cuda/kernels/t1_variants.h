// The kernels that the T = 1 work replaced, still callable for A/B timing (bench/cuda_kernels/t1_ops) and through
// env switches (STRATA_CUDA_HYPER_READ=v1, STRATA_CUDA_ROUTE_TOPK=v1, STRATA_CUDA_RMS_NORM=v1). Same arguments as the
// launchers of kernels.h.
#pragma once
#include "backend/cuda/kernels/kernels.h"

namespace strata::cuda {

void hyper_read_v1(cudaStream_t s, const HyperReadArgs& a, const float* X, int T, void* scratch, float* u, float* inj);
void route_topk_v1(cudaStream_t s, const float* logits, int T, int E, int k, int32_t* ids, float* weights);
void rms_norm_v1(cudaStream_t s, const float* x, const float* w, int w_len, int rows, int width, int group, float eps,
                 float* y);
// hyper_read's kernel 1 with its one-pass prologue at T = 1 (1 on, 0 the two-pass one, −1 back to
// STRATA_CUDA_HR_ONE_PASS, default on).
void hyper_read_set_one_pass(int mode);
void hyper_inject_v1(cudaStream_t s, float* X, const float* inj, const float* y, int T, int n, int H);

}  // namespace strata::cuda
