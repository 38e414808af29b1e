// Small device helpers shared by the kernels: warp and block reductions, grid sizing.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"

namespace strata::cuda {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();                       // partial may still be read by a previous call
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    float r = lane < nwarps ? partial[lane] : 0.0f;
    return warp_sum(r);
}

// Blocks of `threads` threads and smem bytes of dynamic shared memory that the GPU holds at once (occupancy times
// multiprocessors), asked once into known. Unlike matmul.cu's resident_blocks also inside a capture (relaxed mode allows the
// query): for choices of a kernel's shape that graphs must see too.
template <class Kernel>
inline unsigned blocks_at_once(Kernel kernel, int threads, size_t smem, std::atomic<unsigned>& known) {
    const unsigned k = known.load(std::memory_order_relaxed);
    if (k) return k;
    int dev = 0, sms = 0, per_sm = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
    const unsigned r = (unsigned)std::max(1, sms * per_sm);
    known.store(r, std::memory_order_relaxed);
    return r;
}

// The current device's compute capability major version (sm_90: 9), asked once: the switches of the sm_90 paths.
inline int device_cc_major() {
    static const int major = [] {
        int dev = 0, m = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev));
        return m;
    }();
    return major;
}

inline unsigned grid_for(size_t n, int block) {
    size_t g = (n + block - 1) / block;
    return (unsigned)(g < 1 ? 1 : (g > 0x7fffffff ? 0x7fffffff : g));
}

// One block of BLK activations quantized by one warp with quantize_act's arithmetic, lane l holding values l, l + 32,
// … in v: the int8 values go to qb[0 … BLK); returns the block's scale (Q8_0, BLK 32: rounded to fp16 as stored;
// Q8_K, BLK 256: values clamped to ±127). Every kernel that quantizes activations calls this, so they agree bit for bit.
template <int BLK>
__device__ __forceinline__ float quantize_act_block(const float (&v)[BLK / 32], int lane, int8_t* qb) {
    constexpr int V = BLK / 32;
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < V; ++k) amax = fmaxf(amax, fabsf(v[k]));
    amax = warp_max(amax);
    const float dd = amax / 127.0f;
    const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
#pragma unroll
    for (int k = 0; k < V; ++k) {
        float r = rintf(v[k] * id);
        if (BLK == 256) r = fminf(127.0f, fmaxf(-127.0f, r));   // Q8_K clamps, Q8_0 does not need to
        qb[lane + 32 * k] = (int8_t)(int)r;
    }
    return BLK == 32 ? __half2float(__float2half_rn(dd)) : dd;
}

// 16-byte copies global -> shared that run while the thread goes on (sm_80+; a plain copy before).
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned dst = (unsigned)__cvta_generic_to_shared(smem_dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem_src) : "memory");
#else
    *(uint4*)smem_dst = *(const uint4*)gmem_src;
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>   // wait until at most N of this thread's committed groups are pending
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// ---- Programmatic dependent launch (sm_90+; STRATA_CUDA_PDL=0 turns it off): a kernel launched with pdl may start
// while the previous kernel of the stream still runs. It calls pdl_launch_dependents at its start (the next kernel
// may then launch too), may load dense weights (no kernel writes them) and must call pdl_wait before it reads or
// writes anything else: pdl_wait returns once the previous kernel has ended and its memory is visible (and that one,
// if launched with pdl, waited for its own previous kernel: the chain stays ordered). A kernel launched with pdl
// must not end without pdl_wait in some thread of every block. Both are no-ops in a kernel launched the ordinary way.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// p, for reading data an earlier kernel wrote once pdl_wait has returned: no load through the returned pointer can
// be moved above this point. (Through the original pointer the compiler may issue read-only loads of __restrict__
// data at any point of the kernel, before the wait too: 2026-12-04 r74, the hyper read's second kernel read its
// inputs early and cuda_ops_test failed intermittently.) Every dependent pointer of a kernel launched with pdl goes
// through this right after pdl_wait.
template <class T>
__device__ __forceinline__ T* pdl_dep(T* p) {
    uint64_t v = reinterpret_cast<uint64_t>(p);
    asm volatile("mov.b64 %0, %0;" : "+l"(v)::"memory");
    return reinterpret_cast<T*>(v);
}

// Thread `t` of `nt` requests its share of [p, p + bytes) into L2, one 128-byte line at a time.
__device__ __forceinline__ void prefetch_l2_lines(const void* p, size_t bytes, int t, int nt) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~uintptr_t(127);
    const uintptr_t e = reinterpret_cast<uintptr_t>(p) + bytes;
    for (uintptr_t l = a + (uintptr_t)t * 128; l < e; l += (uintptr_t)nt * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(l));
}

// On a device of compute capability 9 or more unless STRATA_CUDA_PDL=0 (read once): the decode kernels that follow
// the protocol above are launched with pdl (launch_kernel). H200, 2026-12-04 r72 / r75: decode +1-3% all on
// the GPU, +3-6% as a 12 GB PC.
bool pdl_enabled();

// kernel<<<grid, threads, smem, s>>>(args), as a programmatic dependent launch of the stream's previous kernel when
// pdl (the kernel follows the protocol above).
template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, unsigned threads, size_t smem, cudaStream_t s, bool pdl,
                   Args... args) {
    if (!pdl) {
        kernel<<<grid, threads, smem, s>>>(args...);
        CUDA_CHECK_LAUNCH();
        return;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...));
}

}  // namespace strata::cuda
