// CUDA_CHECK: every CUDA runtime call goes through it; a failure throws strata::Error naming the call, the place and
// CUDA's error string. CUDA_CHECK_LAUNCH() after every kernel launch catches bad launch configurations at once.
#pragma once
#include <cuda_runtime.h>

#include "common/error.h"

#define CUDA_CHECK(expr)                                                                                    \
    do {                                                                                                    \
        cudaError_t strata_cuda_err_ = (expr);                                                              \
        if (strata_cuda_err_ != cudaSuccess)                                                                \
            ::strata::fail("CUDA error in ", #expr, " at ", __FILE__, ":", __LINE__, ": ",                   \
                           cudaGetErrorName(strata_cuda_err_), " (", cudaGetErrorString(strata_cuda_err_), ")"); \
    } while (0)

#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
