// The small data-movement and elementwise ops (fill, unary, mul, sigmoid_gate, add, scale, add_row/mul_row,
// slice_cols, concat_cols, deinterleave, mean_rows, repeat_streams) and the two MoE helpers (swiglu, moe_combine): one
// thread per output element, grid-stride loops; argmax_rows: a block a row, or for one long row (the logits) many
// blocks and the last one to finish.
#include <climits>
#include <cmath>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace strata::cuda {

namespace {

constexpr int kThreads = 256;

#define STRATA_GRID_LOOP(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

inline unsigned blocks(size_t n) {
    const size_t g = (n + kThreads - 1) / kThreads;
    return (unsigned)(g < 1 ? 1 : (g > 65535 * 16 ? 65535 * 16 : g));
}

__global__ void fill_kernel(float* x, float v, size_t n) {
    STRATA_GRID_LOOP(i, n) x[i] = v;
}

__device__ __forceinline__ float apply_unary(int f, float v) {
    switch (f) {
    case (int)Unary::silu: return v / (1.0f + expf(-v));
    case (int)Unary::sigmoid: return 1.0f / (1.0f + expf(-v));
    case (int)Unary::softplus: return v > 20.0f ? v : log1pf(expf(v));
    default: return expf(v);
    }
}

__global__ void unary_kernel(int f, const float* x, size_t n, float scale, float* y) {
    STRATA_GRID_LOOP(i, n) y[i] = apply_unary(f, x[i] * scale);
}

__global__ void mul_kernel(const float* a, const float* b, size_t n, float* y) {
    STRATA_GRID_LOOP(i, n) y[i] = a[i] * b[i];
}

__global__ void sigmoid_gate_kernel(float* o, const float* gate, size_t n) {
    STRATA_GRID_LOOP(i, n) o[i] = o[i] * apply_unary((int)Unary::sigmoid, gate[i] * 1.0f);   // unary's, then mul's
}

__global__ void add_kernel(float* y, const float* x, size_t n) {
    STRATA_GRID_LOOP(i, n) y[i] += x[i];
}

__global__ void scale_kernel(float* x, size_t n, float v) {
    STRATA_GRID_LOOP(i, n) x[i] *= v;
}

__global__ void row_op_kernel(bool multiply, float* x, size_t n, int width, const float* v) {
    STRATA_GRID_LOOP(i, n) {
        const float r = v[i % width];
        x[i] = multiply ? x[i] * r : x[i] + r;
    }
}

__global__ void slice_cols_kernel(const float* x, int T, int width, int c0, int nc, float* y) {
    STRATA_GRID_LOOP(i, (size_t)T * nc) {
        const size_t t = i / nc, c = i % nc;
        y[i] = x[t * width + c0 + c];
    }
}

__global__ void concat_cols_kernel(const float* a, const float* b, size_t rows, int wa, int wb, float* y) {
    const int w = wa + wb;
    STRATA_GRID_LOOP(i, rows * w) {
        const size_t r = i / w;
        const int c = (int)(i % w);
        y[i] = c < wa ? a[r * wa + c] : b[r * wb + (c - wa)];
    }
}

__global__ void deinterleave_kernel(const float* x, size_t rows, int la, int lb, float* a, float* b) {
    const int w = la + lb;
    STRATA_GRID_LOOP(i, rows * w) {
        const size_t r = i / w;
        const int c = (int)(i % w);
        if (c < la) a[r * la + c] = x[i];
        else b[r * lb + (c - la)] = x[i];
    }
}

__global__ void mean_rows_kernel(const float* x, int rows, int width, float* y) {
    STRATA_GRID_LOOP(j, (size_t)width) {
        float acc = 0.0f;
        for (int r = 0; r < rows; ++r) acc += x[(size_t)r * width + j];
        y[j] = acc / (float)rows;
    }
}

__global__ void repeat_streams_kernel(const float* e, int T, int n, int H, float* X) {
    STRATA_GRID_LOOP(i, (size_t)T * n * H) {
        const size_t t = i / ((size_t)n * H);
        const int j = (int)(i % H);
        X[i] = e[t * H + j];
    }
}

__global__ void swiglu_kernel(const float* gate, const float* up, size_t n, float* h) {
    STRATA_GRID_LOOP(i, n) {
        const float g = gate[i];
        h[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

__global__ void moe_combine_kernel(const float* down, const float* w, int T, int k, int H, float* y) {
    STRATA_GRID_LOOP(i, (size_t)T * H) {
        const size_t t = i / H;
        const int c = (int)(i % H);
        float acc = 0.0f;
        for (int j = 0; j < k; ++j) acc += w[t * k + j] * down[(t * k + j) * H + c];
        y[i] = acc;
    }
}

}  // namespace

namespace {
constexpr int kArgmaxThreads = 1024;

// (v, i) beats (bv, bi): a larger value, or an equal one at a lower index; NaN never wins (its compares are false).
__device__ __forceinline__ bool argmax_better(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

// (bv, bi) of the whole warp in every lane.
__device__ __forceinline__ void warp_best(float& bv, int& bi) {
    for (int o = 16; o > 0; o >>= 1) {
        const float v = __shfl_xor_sync(0xffffffffu, bv, o);
        const int i = __shfl_xor_sync(0xffffffffu, bi, o);
        if (argmax_better(v, i, bv, bi)) { bv = v; bi = i; }
    }
}

// (bv, bi) of the whole block in thread 0 (warps, then warp 0 over the warps' bests). Every thread calls it.
__device__ __forceinline__ void block_best(float& bv, int& bi) {
    __shared__ float sv[32];
    __shared__ int si[32];
    warp_best(bv, bi);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { sv[warp] = bv; si[warp] = bi; }
    __syncthreads();
    if (warp == 0) {
        bv = lane < (int)(blockDim.x >> 5) ? sv[lane] : -INFINITY;
        bi = lane < (int)(blockDim.x >> 5) ? si[lane] : INT_MAX;
        warp_best(bv, bi);
    }
}

// One block a row: each thread its strided share, then warps and the block by (value, index) (common/argmax.h).
__global__ void __launch_bounds__(kArgmaxThreads) argmax_rows_kernel(const float* __restrict__ x, int n,
                                                                     int32_t* __restrict__ out) {
    const float* row = x + (size_t)blockIdx.x * n;
    float bv = -INFINITY;
    int bi = INT_MAX;   // none yet: any non-NaN value (−inf included) beats it by its lower index
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = row[i];
        if (argmax_better(v, i, bv, bi)) { bv = v; bi = i; }
    }
    block_best(bv, bi);
    if (threadIdx.x == 0) out[blockIdx.x] = bi == INT_MAX ? 0 : bi;
}

// One long row (a decode pass's 248K logits: one block of 1,024 threads took ~85 µs on the H200, r26-r27): each block
// takes a contiguous slice, writes its best to the caller's ArgmaxState, and the last block to arrive picks among
// them and resets the count (so the next call, or a replayed graph, finds it at 0). The order (value, then lower
// index) is total, so any split gives the same id.
constexpr int kArgmaxSplitBlocks = 128;
constexpr int kArgmaxSplitThreads = 256;
constexpr int kArgmaxSplitMinN = 32768;
struct ArgmaxState {
    float part_v[kArgmaxSplitBlocks];
    int part_i[kArgmaxSplitBlocks];
    unsigned arrived;
};

__global__ void __launch_bounds__(kArgmaxSplitThreads) argmax_long_row_kernel(const float* __restrict__ x, int n,
                                                                              ArgmaxState* state,
                                                                              int32_t* __restrict__ out) {
    __shared__ bool last;
    const int chunk = (n + (int)gridDim.x - 1) / (int)gridDim.x;
    const int begin = (int)blockIdx.x * chunk, end = min(n, begin + chunk);
    float bv = -INFINITY;
    int bi = INT_MAX;
#pragma unroll 4
    for (int i = begin + (int)threadIdx.x; i < end; i += blockDim.x) {
        const float v = x[i];
        if (argmax_better(v, i, bv, bi)) { bv = v; bi = i; }
    }
    block_best(bv, bi);
    if (threadIdx.x == 0) {
        state->part_v[blockIdx.x] = bv;
        state->part_i[blockIdx.x] = bi;
        __threadfence();
        last = atomicAdd(&state->arrived, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last || threadIdx.x >= 32) return;
    __threadfence();
    bv = -INFINITY;
    bi = INT_MAX;
    for (int b = (int)threadIdx.x; b < (int)gridDim.x; b += 32) {
        const float v = __ldcg(&state->part_v[b]);
        const int i = __ldcg(&state->part_i[b]);
        if (argmax_better(v, i, bv, bi)) { bv = v; bi = i; }
    }
    warp_best(bv, bi);
    if (threadIdx.x == 0) {
        out[0] = bi == INT_MAX ? 0 : bi;
        state->arrived = 0;
    }
}
}  // namespace

size_t argmax_state_bytes() { return sizeof(ArgmaxState); }

void argmax_rows(cudaStream_t s, const float* x, int rows, int n, int32_t* out, void* state) {
    if (rows <= 0) return;
    if (rows == 1 && n >= kArgmaxSplitMinN && state) {
        argmax_long_row_kernel<<<kArgmaxSplitBlocks, kArgmaxSplitThreads, 0, s>>>(x, n, static_cast<ArgmaxState*>(state),
                                                                                   out);
        CUDA_CHECK_LAUNCH();
        return;
    }
    argmax_rows_kernel<<<rows, kArgmaxThreads, 0, s>>>(x, n, out);
    CUDA_CHECK_LAUNCH();
}

void fill(cudaStream_t s, float* x, float v, size_t n) {
    if (!n) return;
    fill_kernel<<<blocks(n), kThreads, 0, s>>>(x, v, n);
    CUDA_CHECK_LAUNCH();
}

void unary(cudaStream_t s, Unary f, const float* x, size_t n, float scale, float* y) {
    if (!n) return;
    unary_kernel<<<blocks(n), kThreads, 0, s>>>((int)f, x, n, scale, y);
    CUDA_CHECK_LAUNCH();
}

void mul(cudaStream_t s, const float* a, const float* b, size_t n, float* y) {
    if (!n) return;
    mul_kernel<<<blocks(n), kThreads, 0, s>>>(a, b, n, y);
    CUDA_CHECK_LAUNCH();
}

void sigmoid_gate(cudaStream_t s, float* o, const float* gate, size_t n) {
    if (!n) return;
    sigmoid_gate_kernel<<<blocks(n), kThreads, 0, s>>>(o, gate, n);
    CUDA_CHECK_LAUNCH();
}

void add(cudaStream_t s, float* y, const float* x, size_t n) {
    if (!n) return;
    add_kernel<<<blocks(n), kThreads, 0, s>>>(y, x, n);
    CUDA_CHECK_LAUNCH();
}

void scale(cudaStream_t s, float* x, size_t n, float v) {
    if (!n) return;
    scale_kernel<<<blocks(n), kThreads, 0, s>>>(x, n, v);
    CUDA_CHECK_LAUNCH();
}

void row_op(cudaStream_t s, bool multiply, float* x, int T, int width, const float* v) {
    const size_t n = (size_t)T * width;
    if (!n) return;
    row_op_kernel<<<blocks(n), kThreads, 0, s>>>(multiply, x, n, width, v);
    CUDA_CHECK_LAUNCH();
}

void slice_cols(cudaStream_t s, const float* x, int T, int width, int c0, int nc, float* y) {
    const size_t n = (size_t)T * nc;
    if (!n) return;
    slice_cols_kernel<<<blocks(n), kThreads, 0, s>>>(x, T, width, c0, nc, y);
    CUDA_CHECK_LAUNCH();
}

void concat_cols(cudaStream_t s, const float* a, const float* b, int rows, int wa, int wb, float* y) {
    if (!rows || !(wa + wb)) return;
    concat_cols_kernel<<<blocks((size_t)rows * (wa + wb)), kThreads, 0, s>>>(a, b, rows, wa, wb, y);
    CUDA_CHECK_LAUNCH();
}

void deinterleave(cudaStream_t s, const float* x, int T, int n_heads, int la, int lb, float* a, float* b) {
    const size_t rows = (size_t)T * n_heads;
    if (!rows) return;
    deinterleave_kernel<<<blocks(rows * (la + lb)), kThreads, 0, s>>>(x, rows, la, lb, a, b);
    CUDA_CHECK_LAUNCH();
}

void mean_rows(cudaStream_t s, const float* x, int rows, int width, float* y) {
    if (!width) return;
    mean_rows_kernel<<<blocks(width), kThreads, 0, s>>>(x, rows, width, y);
    CUDA_CHECK_LAUNCH();
}

void repeat_streams(cudaStream_t s, const float* e, int T, int n, int H, float* X) {
    const size_t total = (size_t)T * n * H;
    if (!total) return;
    repeat_streams_kernel<<<blocks(total), kThreads, 0, s>>>(e, T, n, H, X);
    CUDA_CHECK_LAUNCH();
}

void swiglu(cudaStream_t s, const float* gate, const float* up, size_t n, float* h) {
    if (!n) return;
    swiglu_kernel<<<blocks(n), kThreads, 0, s>>>(gate, up, n, h);
    CUDA_CHECK_LAUNCH();
}

void moe_combine(cudaStream_t s, const float* down, const float* w, int T, int k, int H, float* y) {
    const size_t n = (size_t)T * H;
    if (!n) return;
    moe_combine_kernel<<<blocks(n), kThreads, 0, s>>>(down, w, T, k, H, y);
    CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
