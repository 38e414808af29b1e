// pdl_enabled(): whether launch_kernel() asks for programmatic dependent launches; prefetch_rows() (launch.cuh).
#include <algorithm>
#include <atomic>

#include "backend/cuda/kernels/launch.cuh"

namespace strata::cuda {

namespace {
std::atomic<int> g_pdl{-1};   // -1: not decided yet; then 0 or 1
}

bool pdl_enabled() {
    int v = g_pdl.load(std::memory_order_relaxed);
    if (v < 0) {
        const char* e = std::getenv("STRATA_CUDA_PDL");
        int dev = 0, major = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        v = major >= 9 && !(e && std::strcmp(e, "0") == 0) ? 1 : 0;
        g_pdl.store(v, std::memory_order_relaxed);
    }
    return v == 1;
}

int prefetch_rows() {
    static const int rows = [] {
        const char* e = std::getenv("STRATA_CUDA_PREFETCH");
        return e ? std::max(0, std::atoi(e)) : 2;
    }();
    return rows;
}

void pdl_set(int mode) { g_pdl.store(mode < 0 ? -1 : mode ? 1 : 0, std::memory_order_relaxed); }

}  // namespace strata::cuda
