// Kernel launches as programmatic dependent launches (PDL, sm_90+): a kernel's blocks may be scheduled while the
// previous kernel of its stream still runs, so a decode pass of ~1,000 small kernels does not pay each launch's
// latency in full. The contract that keeps stream order: every kernel starts with pdl_entry(), which waits for the
// previous kernel to finish and its writes to be visible (griddepcontrol.wait) before the kernel reads or writes
// anything, then lets the next kernel's blocks be scheduled (griddepcontrol.launch_dependents). Only reads of data no
// earlier kernel writes (weights, constant tables) may come before it, marked `// before pdl_entry:`.
// tests/engine/test_pdl_entry.py checks that every __global__ kernel of the engine starts this way and that every
// launch goes through launch_kernel().
// STRATA_CUDA_PDL=0 launches the ordinary way (the wait and the trigger are then no-ops).
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"

namespace strata::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The first statement of every kernel: wait for the previous kernel, then let the next one be scheduled. The trigger
// after the wait keeps at most one kernel ahead of the running one (no chain of waiting blocks filling the GPU).
__device__ __forceinline__ void pdl_entry() {
    pdl_wait();
    pdl_launch_dependents();
}

// Loads the 128-byte line holding p into L2 (no register result: the kernel goes on at once).
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// Before pdl_entry, a kernel whose weights no earlier kernel writes asks for them while the previous kernel runs: the
// lines of bytes [p, p + bytes), spread over `lanes` threads (this thread is number `lane` of them).
__device__ __forceinline__ void prefetch_l2_range(const void* p, size_t bytes, int lane, int lanes) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    const uintptr_t first = reinterpret_cast<uintptr_t>(b) & ~(uintptr_t)127;
    const uintptr_t end = reinterpret_cast<uintptr_t>(b + bytes);
    for (uintptr_t a = first + (uintptr_t)lane * 128; a < end; a += (uintptr_t)lanes * 128)
        prefetch_l2(reinterpret_cast<const void*>(a));
}

// Rows of weights per warp (or block) that the decode matmul kernels prefetch before pdl_entry: STRATA_CUDA_PREFETCH
// (default 2; 0 = none). Read once.
int prefetch_rows();

// Whether launch_kernel() asks for programmatic dependent launches: the device is sm_90 or newer and STRATA_CUDA_PDL
// is not 0. Asked once per process (one device).
bool pdl_enabled();
// Tests and benchmarks: 1 on, 0 off, -1 back to the environment's choice.
void pdl_set(int mode);

// kernel<<<grid, block, smem, s>>>(args...), as a programmatic dependent launch when pdl_enabled(); launch errors are
// checked at once.
template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args&&... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    if (pdl_enabled()) {
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
    }
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...));
}

}  // namespace strata::cuda
