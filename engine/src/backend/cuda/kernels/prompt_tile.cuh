// The activation rows of one block of the prompt-sized matmul kernels (matmul_tiled.cu's f32 kernel and
// matmul_mmq.cuh's tensor-core one): a tile of TT output rows of one matrix, or of one expert's pairs.
#pragma once
#include <cstddef>
#include <cstdint>

namespace strata::cuda {

// items set: the block's tile is items[blockIdx.y] = (matrix, first slot of `order`, count), pairs sorted by expert;
// else rows blockIdx.y·TT … of P. Threads 0 … TT−1 write each tile row's output row (prow, −1 past the end) and
// activation row (arow = prow / act_div); the caller syncs before reading them. Returns the tile's matrix, or null
// when blockIdx.y is past *n_items (the whole block then returns).
template <int TT>
__device__ __forceinline__ const uint8_t* prompt_tile_rows(const uint8_t* W, size_t mat_stride, int act_div, int P,
                                                           const int32_t* __restrict__ order,
                                                           const int4* __restrict__ items,
                                                           const int32_t* __restrict__ n_items, int* arow, int* prow) {
    const uint8_t* wm = W;
    int first, count;
    if (items) {
        if ((int)blockIdx.y >= *n_items) return nullptr;
        const int4 it = items[blockIdx.y];
        wm = W + (size_t)it.x * mat_stride;
        first = it.y;
        count = it.z;
    } else {
        first = blockIdx.y * TT;
        count = min(TT, P - first);
    }
    if (threadIdx.x < TT) {
        const int t = threadIdx.x;
        const int p = t < count ? (order ? order[first + t] : first + t) : -1;
        prow[t] = p;
        arow[t] = p >= 0 ? p / act_div : -1;
    }
    return wm;
}

}  // namespace strata::cuda
