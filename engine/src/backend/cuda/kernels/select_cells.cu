// QSA cell choice on the device (Backend::select_cells), one block of 1024 threads per query: a radix select finds
// the kb-th largest block score (warp-aggregated histogram counts, the digit found by one warp's scan), the blocks
// above it (and as many equal to it as needed) are flagged, listed in ascending order as key cells, then the tail.
// When the kb-th score is tied with a block left out, one thread redoes the choice with torch.topk's own steps
// (model/topk_exact.h), as the CPU does.
#include <mutex>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"
#include "common/error.h"
#include "model/topk_exact.h"

namespace strata::cuda {

namespace {

constexpr int kThreads = 1024;
constexpr int kWarpsPerBlock = kThreads / 32;

// Order key: a smaller key is a larger score; −0 and +0 share a key (they compare equal).
__device__ __forceinline__ uint32_t desc_key(float f) {
    uint32_t u = __float_as_uint(f);
    if (f == 0.0f) u = 0;
    const uint32_t ascending = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ~ascending;
}

// Exclusive prefix sum of v over the block's threads (every thread calls it).
__device__ int block_exclusive_scan(int v, int* s_warp) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) s_warp[warp] = x;
    __syncthreads();
    if (warp == 0) {
        int w = lane < kWarpsPerBlock ? s_warp[lane] : 0;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += y;
        }
        s_warp[lane] = w;
    }
    __syncthreads();
    return x - v + (warp ? s_warp[warp - 1] : 0);
}

__global__ void __launch_bounds__(kThreads)
select_cells_kernel(const float* scores, int stride, const int32_t* pos, int cr, int kb, const int32_t* off,
                    int32_t* cells, topk_exact::Elem* scratch, bool elems_shared) {
    extern __shared__ uint64_t dyn[];       // flags (one bit per block: chosen), then the tie path's elements
    uint32_t* flags = reinterpret_cast<uint32_t*>(dyn);
    __shared__ uint32_t hist[256];
    __shared__ uint32_t s_prefix, s_mask;
    __shared__ int s_need, s_equal;
    __shared__ int s_warp[kWarpsPerBlock];
    const int t = blockIdx.x, tid = threadIdx.x;
    const int M = pos[t] + 1, nb = min(M / cr, stride);   // (the model's rows hold every complete block)
    int32_t* out = cells + off[t];
    if (nb <= kb) {
        for (int c = tid; c < M; c += kThreads) out[c] = c;
        return;
    }
    const float* s = scores + (size_t)t * stride;
    const int words = (nb + 31) / 32;
    for (int w = tid; w < words; w += kThreads) flags[w] = 0;
    if (tid == 0) {
        s_prefix = 0;
        s_mask = 0;
        s_need = kb;
    }
    __syncthreads();

    // Radix select over the keys, 8 bits at a time from the top: the key of the kb-th largest score.
    const int lane = tid & 31;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = tid; b < 256; b += kThreads) hist[b] = 0;
        __syncthreads();
        const uint32_t prefix = s_prefix, mask = s_mask;
        for (int base = tid - lane; base < nb; base += kThreads) {     // whole warps, so the match is convergent
            const int i = base + lane;
            const uint32_t k = i < nb ? desc_key(s[i]) : 0;
            const bool take = i < nb && (k & mask) == prefix;
            const uint32_t bin = take ? (k >> shift) & 255u : 256u;
            const uint32_t peers = __match_any_sync(0xffffffffu, bin);
            if (take && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], (uint32_t)__popc(peers));
        }
        __syncthreads();
        if (tid < 32) {    // one warp finds the bin holding the need-th key: 8 bins per lane, a scan over lanes
            uint32_t c[8], sum = 0;
#pragma unroll
            for (int j = 0; j < 8; ++j) sum += c[j] = hist[lane * 8 + j];
            uint32_t incl = sum;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const uint32_t y = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl += y;
            }
            const int need = s_need;
            const int first = __ffs(__ballot_sync(0xffffffffu, (int)incl >= need)) - 1;
            if (lane == first) {
                int left = need - (int)(incl - sum), j = 0;
                while (left > (int)c[j]) left -= (int)c[j++];
                s_prefix = prefix | ((uint32_t)(lane * 8 + j) << shift);
                s_mask = mask | (255u << shift);
                s_need = left;          // of the scores with this key prefix, how many are still to take
                s_equal = (int)c[j];
            }
        }
        __syncthreads();
    }

    const uint32_t kth = s_prefix;
    if (s_need == s_equal) {            // every score equal to the kb-th is taken: no tie to break
        for (int i = tid; i < nb; i += kThreads)
            if (desc_key(s[i]) <= kth) atomicOr(&flags[i >> 5], 1u << (i & 31));
    } else if (tid == 0) {
        // out[0 … kb) serves as the index list here; the cells overwrite it below.
        topk_exact::Elem* elems = elems_shared ? reinterpret_cast<topk_exact::Elem*>(dyn + (stride + 63) / 64)
                                               : scratch + (size_t)t * stride;
        topk_exact::topk(s, nb, kb, elems, out);
        for (int j = 0; j < kb; ++j) flags[out[j] >> 5] |= 1u << (out[j] & 31);
    }
    __syncthreads();

    // The chosen blocks in ascending order: thread tid lists the blocks of its run of flag words.
    const int per = (words + kThreads - 1) / kThreads;
    const int w0 = min(words, tid * per), w1 = min(words, w0 + per);
    int count = 0;
    for (int w = w0; w < w1; ++w) count += __popc(flags[w]);
    int rank = block_exclusive_scan(count, s_warp);
    for (int w = w0; w < w1; ++w) {
        uint32_t bits = flags[w];
        while (bits) {
            const int b = w * 32 + __ffs(bits) - 1;
            bits &= bits - 1;
            for (int j = 0; j < cr; ++j) out[(size_t)rank * cr + j] = b * cr + j;
            ++rank;
        }
    }
    for (int c = nb * cr + tid; c < M; c += kThreads) out[(size_t)kb * cr + (c - nb * cr)] = c;   // the tail
}

// Most dynamic shared memory a block may ask for on this device (opt-in), less this kernel's static arrays.
size_t shared_optin_bytes() {
    static size_t bytes[64] = {};
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (dev >= 64) return 0;
    if (!bytes[dev]) {
        int optin = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        cudaFuncAttributes attr{};
        CUDA_CHECK(cudaFuncGetAttributes(&attr, select_cells_kernel));
        bytes[dev] = optin > (int)attr.sharedSizeBytes ? (size_t)optin - attr.sharedSizeBytes : 1;
    }
    return bytes[dev];
}

// Lets the kernel take `bytes` of dynamic shared memory (above the default 48 KiB); a host-side setting, also
// allowed while the stream is being captured.
void allow_dynamic_shared(size_t bytes) {
    static std::mutex mu;
    static size_t allowed[64] = {};
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    std::lock_guard<std::mutex> lock(mu);
    if (dev < 64 && allowed[dev] >= bytes) return;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    const cudaError_t e =
        cudaFuncSetAttribute(select_cells_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    CUDA_CHECK(e);
    if (dev < 64) allowed[dev] = bytes;
}

}  // namespace

size_t select_cells_scratch_bytes(int T, int stride) { return (size_t)T * stride * sizeof(topk_exact::Elem); }

void select_cells(cudaStream_t s, const float* scores, int stride, int T, const int32_t* pos, int cr, int kb,
                  const int32_t* off, int32_t* cells, void* scratch) {
    if (T <= 0) return;
    STRATA_CHECK(cr > 0 && kb > 0, "cuda select_cells: compress ratio ", cr, ", budget blocks ", kb);
    const size_t flag_bytes = (size_t)((stride + 63) / 64) * 8;    // whole 8-byte words, so the elements align
    STRATA_CHECK(flag_bytes <= 40 * 1024, "cuda select_cells: ", stride, " blocks exceed the shared-memory flag array");
    // The tie path's elements in shared memory too where the device allows it (a single thread walks them: shared
    // memory's latency instead of global memory's); otherwise in the scratch.
    const size_t with_elems = flag_bytes + (size_t)stride * sizeof(topk_exact::Elem);
    const bool elems_shared = with_elems <= shared_optin_bytes();
    const size_t smem = elems_shared ? with_elems : flag_bytes;
    if (smem > 48 * 1024) allow_dynamic_shared(smem);
    select_cells_kernel<<<T, kThreads, smem, s>>>(scores, stride, pos, cr, kb, off, cells,
                                                  static_cast<topk_exact::Elem*>(scratch), elems_shared);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace strata::cuda
