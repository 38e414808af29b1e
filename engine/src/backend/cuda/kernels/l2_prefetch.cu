// Backend::prefetch_weights on the GPU: the next sub-block's weights requested into L2 while the kernels before them
// run, so that their first loads hit L2 instead of HBM. On sm_90+ one thread requests 32 KB at a time with a bulk
// prefetch (the SM's TMA unit fetches it; nothing waits for it); before sm_90, one 128-byte line at a time.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/kernels.h"

namespace strata::cuda {
namespace {

constexpr int kThreads = 128, kBlocks = 8;

__global__ void l2_prefetch_kernel(L2Ranges r, int evict_last) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr uintptr_t kStep = 32 << 10;
#else
    constexpr uintptr_t kStep = 128;
#endif
    const uintptr_t stride = (uintptr_t)gridDim.x * blockDim.x * kStep;
    const uintptr_t first = (uintptr_t)(blockIdx.x * blockDim.x + threadIdx.x) * kStep;
    for (int i = 0; i < r.n; ++i) {
        // The 16-byte-aligned inside of the range (a bulk prefetch needs 16-byte alignment and size).
        const uintptr_t a = (reinterpret_cast<uintptr_t>(r.p[i]) + 15) & ~uintptr_t(15);
        const uintptr_t e = (reinterpret_cast<uintptr_t>(r.p[i]) + r.bytes[i]) & ~uintptr_t(15);
        for (uintptr_t c = a + first; c < e; c += stride) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            const uint32_t n = (uint32_t)(e - c < kStep ? e - c : kStep);
            if (evict_last)
                asm volatile(
                    "{\n\t.reg .b64 pol;\n\t"
                    "createpolicy.fractional.L2::evict_last.b64 pol, 1.0;\n\t"
                    "cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, pol;\n\t}" ::"l"(c),
                    "r"(n)
                    : "memory");
            else
                asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(c), "r"(n) : "memory");
#else
            if (evict_last) asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(c));
            else asm volatile("prefetch.global.L2 [%0];" ::"l"(c));
#endif
        }
    }
}

}  // namespace

void l2_prefetch(cudaStream_t s, const L2Ranges& r, bool evict_last) {
    if (r.n <= 0) return;
    l2_prefetch_kernel<<<kBlocks, kThreads, 0, s>>>(r, evict_last ? 1 : 0);
    CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
