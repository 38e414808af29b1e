// attention: softmax attention of each query over its kept key cells (GQA). A block of 4 warps runs an online
// softmax over a range of one (query, head)'s cells, each warp 4 cells at a time. Few queries (decode, verify) split
// the cells over many blocks ("flash decoding") and a second kernel merges the partial results; many queries take
// one block per (query, head) over all its cells. A variant grouped by kv head (a block's warps share each K/V row)
// is kept for A/B (STRATA_CUDA_GROUPED_ATTN=1): slower on the H200.
#include <algorithm>
#include <cfloat>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include <cuda_fp16.h>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace strata::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kMaxHd = 256;
constexpr int kCellsPerStep = 4;      // cells a warp has in flight at once
constexpr int kMinChunkCells = 32;    // fewest cells a split block takes
constexpr int kLongWarpCells = 128;   // most cells a warp of a split block takes where the chunk count allows
constexpr int kMaxGroup = 16;         // most query heads per kv head the grouped kernel takes
constexpr int kMinGroupedChunkCells = 16;   // fewest cells a grouped split block takes
constexpr int kMaxChunks = 128;       // most blocks one (query, head) is split over
constexpr int kMaxPartials = 4096;    // partial results of one split launch: T·nh·chunks

// The partial result of one block: unnormalized sum acc[hd] relative to its max m, and the weight sum l.
struct Partials {
    float* acc = nullptr;    // [kMaxPartials][kMaxHd]
    float2* ml = nullptr;    // [kMaxPartials] (m, l)
};

// A key or value cache in one of the formats of backend/kv_format.h, read as f32 (--kv f32, f16, q8). A lane holds E
// of a head's hd ≤ 32·E columns: kv_col(lane, e, hd) says which. f32 lanes take lane + 32·e (coalesced floats); f16
// and q8 lanes take E consecutive columns where hd = 32·E, so that load reads a lane's row piece as 4-byte words (q8
// at hd 256: 8 values and one scale in 3 loads instead of 16; 2026-12-05 r116 on an H100, 32K context: decode 171.9 /
// 174.5 -> 200.6 / 199.2 tok/s, the 32K prompt 945 / 1,028 -> 1,540 tok/s). kv_row: x[e] = element col0 +
// kv_col(lane, e, hd) of a row, 0 past hd.
struct KvF32 {
    const float* p;
    size_t row;   // floats a row
    template <int E> static constexpr bool kContiguous = false;
    __device__ __forceinline__ float at(size_t cell, int col) const { return p[cell * row + col]; }
};
struct KvF16 {
    const __half* p;
    size_t row;   // fp16 values a row (even: rows stay 4-byte aligned)
    template <int E> static constexpr bool kContiguous = E % 2 == 0;   // half2 loads
    __device__ __forceinline__ float at(size_t cell, int col) const { return __half2float(p[cell * row + col]); }
    template <int E>
    __device__ __forceinline__ void load(size_t cell, int c, float (&x)[E]) const {   // c: the lane's first column
        const __half2* h = reinterpret_cast<const __half2*>(p + cell * row + c);
#pragma unroll
        for (int i = 0; i < E / 2; ++i) {
            const float2 f = __half22float2(h[i]);
            x[2 * i] = f.x;
            x[2 * i + 1] = f.y;
        }
    }
};
struct KvQ8 {
    const uint8_t* p;
    size_t row_bytes;   // the row stride (padded to 4 bytes)
    int width;          // values a row: its fp16 scales follow them
    template <int E> static constexpr bool kContiguous = E % 4 == 0 && kKvQ8Group % E == 0;   // words, one scale
    __device__ __forceinline__ float at(size_t cell, int col) const {
        const uint8_t* r = p + cell * row_bytes;
        return (float)(int8_t)r[col] * __half2float(reinterpret_cast<const __half*>(r + width)[col / kKvQ8Group]);
    }
    template <int E>
    __device__ __forceinline__ void load(size_t cell, int c, float (&x)[E]) const {
        const uint8_t* r = p + cell * row_bytes;
        const float d = __half2float(reinterpret_cast<const __half*>(r + width)[c / kKvQ8Group]);
        const uint32_t* w = reinterpret_cast<const uint32_t*>(r + c);
#pragma unroll
        for (int i = 0; i < E / 4; ++i) {
            const uint32_t v = w[i];
#pragma unroll
            for (int b = 0; b < 4; ++b) x[4 * i + b] = (float)(int8_t)(v >> (8 * b)) * d;
        }
    }
};

// Column of a head that lane's e-th value is (see the KV structs above).
template <class KV, int E>
__device__ __forceinline__ int kv_col(int lane, int e, int hd) {
    return KV::template kContiguous<E> && hd == 32 * E ? lane * E + e : lane + 32 * e;
}
template <class KV, int E>
__device__ __forceinline__ void kv_row(const KV& kv, size_t cell, int col0, int lane, int hd, float (&x)[E]) {
    if constexpr (KV::template kContiguous<E>) {
        if (hd == 32 * E) {
            kv.template load<E>(cell, col0 + lane * E, x);
            return;
        }
    }
#pragma unroll
    for (int e = 0; e < E; ++e) {
        const int j = lane + 32 * e;
        x[e] = j < hd ? kv.at(cell, col0 + j) : 0.0f;
    }
}

// Online softmax of one warp over cells c0, c0 + step, … < c1 (positions cl[c], or c when cl is null), with
// kCellsPerStep of them loaded before reducing so their loads overlap. col0: the kv head's first column in a row.
template <int E, class KV>
__device__ __forceinline__ void softmax_cells(const float (&qv)[E], const KV& K, const KV& V, int col0,
                                              int hd, const int32_t* cl, int c0, int c1, int step, float scale,
                                              float& m, float& l, float (&acc)[E]) {
    const int lane = threadIdx.x & 31;
    for (int c = c0; c < c1; c += step * kCellsPerStep) {
        float kx[kCellsPerStep][E], vx[kCellsPerStep][E];
        bool valid[kCellsPerStep];
#pragma unroll
        for (int u = 0; u < kCellsPerStep; ++u) {
            const int cu = c + u * step;
            valid[u] = cu < c1;
            const size_t p = !valid[u] ? 0 : cl ? (size_t)cl[cu] : (size_t)cu;   // (cell 0 stands in: masked below)
            kv_row<KV, E>(K, p, col0, lane, hd, kx[u]);
            kv_row<KV, E>(V, p, col0, lane, hd, vx[u]);
        }
        float d[kCellsPerStep], m_new = m;
#pragma unroll
        for (int u = 0; u < kCellsPerStep; ++u) {
            float s = 0.0f;
#pragma unroll
            for (int e = 0; e < E; ++e) s += qv[e] * kx[u][e];
            d[u] = warp_sum(s) * scale;
            if (valid[u]) m_new = fmaxf(m_new, d[u]);
        }
        const float corr = expf(m - m_new);
        l *= corr;
#pragma unroll
        for (int e = 0; e < E; ++e) acc[e] *= corr;
#pragma unroll
        for (int u = 0; u < kCellsPerStep; ++u) {
            const float pr = valid[u] ? expf(d[u] - m_new) : 0.0f;
            l += pr;
#pragma unroll
            for (int e = 0; e < E; ++e) acc[e] += pr * vx[u][e];
        }
        m = m_new;
    }
}

// Template E: values per lane (hd <= 32·E). Split: write this block's partial result for chunk blockIdx.x of
// `chunks`; otherwise the block covers every cell and writes the normalized output.
template <int E, bool Split, class KV>
__global__ void __launch_bounds__(kWarps * 32)
attention_kernel(const float* q, const KV K, const KV V, int nh, int nkv, int hd, const int32_t* off,
                 const int32_t* cells, int n0, int chunks, float* o, Partials part) {
    __shared__ float s_m[kWarps], s_l[kWarps], s_acc[kWarps][kMaxHd];
    const int th = Split ? blockIdx.y : blockIdx.x, t = th / nh, h = th % nh, kvh = h / (nh / nkv);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float scale = 1.0f / sqrtf((float)hd);

    const int n_cells = off ? off[t + 1] - off[t] : n0 + t;
    const int32_t* cl = cells ? cells + off[t] : nullptr;
    int c0 = 0, c1 = n_cells;
    if (Split) {
        const int per = max(kMinChunkCells, (n_cells + chunks - 1) / chunks);
        c0 = min(n_cells, (int)blockIdx.x * per);
        c1 = min(n_cells, c0 + per);
        if (c0 == c1) {              // nothing left for this chunk: an empty partial
            if (threadIdx.x == 0) part.ml[(size_t)th * chunks + blockIdx.x] = make_float2(-FLT_MAX, 0.0f);
            return;
        }
    }

    float qv[E], acc[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
        const int j = kv_col<KV, E>(lane, e, hd);
        qv[e] = j < hd ? q[(size_t)th * hd + j] : 0.0f;
        acc[e] = 0.0f;
    }
    float m = -FLT_MAX, l = 0.0f;
    softmax_cells<E, KV>(qv, K, V, kvh * hd, hd, cl, c0 + warp, c1, kWarps, scale, m, l, acc);
    if (lane == 0) {
        s_m[warp] = m;
        s_l[warp] = l;
    }
#pragma unroll
    for (int e = 0; e < E; ++e) {
        const int j = kv_col<KV, E>(lane, e, hd);
        if (j < hd) s_acc[warp][j] = acc[e];
    }
    __syncthreads();
    float M = -FLT_MAX;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, s_m[w]);
    float L = 0.0f, f[kWarps];
    for (int w = 0; w < kWarps; ++w) {
        f[w] = s_l[w] > 0.0f ? expf(s_m[w] - M) : 0.0f;
        L += s_l[w] * f[w];
    }
    const size_t slot = (size_t)th * chunks + blockIdx.x;
    for (int j = threadIdx.x; j < hd; j += blockDim.x) {
        float r = 0.0f;
        for (int w = 0; w < kWarps; ++w) r += s_acc[w][j] * f[w];
        if (Split) part.acc[slot * kMaxHd + j] = r;
        else o[(size_t)th * hd + j] = r / L;
    }
    if (Split && threadIdx.x == 0) part.ml[slot] = make_float2(M, L);
}

// GQA-grouped, split over chunks or not: a block of G = nh / nkv warps per (query, kv head, chunk), warp w for query
// head kvh·G + w over every cell of the chunk, so the G warps read each key and value row together (one L2 read,
// the rest L1 hits). Writes the same partial results as attention_kernel<E, true>, or with one chunk the output o.
template <int E, class KV>
__global__ void __launch_bounds__(kMaxGroup * 32)
attention_grouped_kernel(const float* q, const KV K, const KV V, int nh, int nkv, int hd, const int32_t* off,
                         const int32_t* cells, int n0, int chunks, Partials part, float* o) {
    const int tk = blockIdx.y, t = tk / nkv, kvh = tk % nkv, group = nh / nkv;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, th = t * nh + kvh * group + warp;
    const size_t slot = (size_t)th * chunks + blockIdx.x;
    const int n_cells = off ? off[t + 1] - off[t] : n0 + t;
    const int per = max(kMinGroupedChunkCells, (n_cells + chunks - 1) / chunks);
    const int c0 = min(n_cells, (int)blockIdx.x * per), c1 = min(n_cells, c0 + per);
    if (c0 == c1 && chunks > 1) {
        if (lane == 0) part.ml[slot] = make_float2(-FLT_MAX, 0.0f);
        return;
    }
    float qv[E], acc[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
        const int j = kv_col<KV, E>(lane, e, hd);
        qv[e] = j < hd ? q[(size_t)th * hd + j] : 0.0f;
        acc[e] = 0.0f;
    }
    float m = -FLT_MAX, l = 0.0f;
    softmax_cells<E, KV>(qv, K, V, kvh * hd, hd, cells ? cells + off[t] : nullptr, c0, c1, 1,
                         1.0f / sqrtf((float)hd), m, l, acc);
    if (chunks == 1) {
#pragma unroll
        for (int e = 0; e < E; ++e) {
            const int j = kv_col<KV, E>(lane, e, hd);
            if (j < hd) o[(size_t)th * hd + j] = acc[e] / l;
        }
        return;
    }
#pragma unroll
    for (int e = 0; e < E; ++e) {
        const int j = kv_col<KV, E>(lane, e, hd);
        if (j < hd) part.acc[slot * kMaxHd + j] = acc[e];
    }
    if (lane == 0) part.ml[slot] = make_float2(m, l);
}

// One block per (query, head): o = Σ_chunks acc·e^(m−M) / Σ_chunks l·e^(m−M), M the largest chunk max.
__global__ void attention_merge_kernel(int hd, int chunks, Partials part, float* o) {
    const size_t th = blockIdx.x;
    const float2* ml = part.ml + th * chunks;
    float M = -FLT_MAX;
    for (int c = 0; c < chunks; ++c)
        if (ml[c].y > 0.0f) M = fmaxf(M, ml[c].x);
    float L = 0.0f;
    for (int c = 0; c < chunks; ++c)
        if (ml[c].y > 0.0f) L += ml[c].y * expf(ml[c].x - M);
    for (int j = threadIdx.x; j < hd; j += blockDim.x) {
        float r = 0.0f;
        for (int c = 0; c < chunks; ++c)
            if (ml[c].y > 0.0f) r += part.acc[(th * chunks + c) * kMaxHd + j] * expf(ml[c].x - M);
        o[th * hd + j] = r / L;
    }
}

// Partial-result buffers, one per (device, stream) so that streams never share one; allocated on first use (also
// inside a graph capture: the allocation is not stream work) and freed at exit.
class PartialBuffers {
public:
    ~PartialBuffers() {
        for (auto& [key, p] : bufs_) {
            cudaFree(p.acc);     // errors ignored: at exit the runtime may already be gone
            cudaFree(p.ml);
        }
    }
    Partials get(cudaStream_t s) {
        int dev = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        std::lock_guard<std::mutex> lock(mu_);
        Partials& p = bufs_[{dev, s}];
        if (!p.acc) {
            cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;   // allows cudaMalloc during a capture
            CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
            const cudaError_t e1 = cudaMalloc(&p.acc, sizeof(float) * kMaxPartials * kMaxHd);
            const cudaError_t e2 = e1 == cudaSuccess ? cudaMalloc(&p.ml, sizeof(float2) * kMaxPartials) : e1;
            CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
            CUDA_CHECK(e2);
        }
        return p;
    }

private:
    std::mutex mu_;
    std::map<std::pair<int, cudaStream_t>, Partials> bufs_;
};

Partials partials_for(cudaStream_t s) {
    static PartialBuffers buffers;
    return buffers.get(s);
}

int sm_count() {
    static int count[64] = {};
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (dev >= 64) return 132;
    if (!count[dev]) CUDA_CHECK(cudaDeviceGetAttribute(&count[dev], cudaDevAttrMultiProcessorCount, dev));
    return count[dev];
}

template <int E, class KV>
void launch(cudaStream_t s, const float* q, const KV& K, const KV& V, int T, int nh, int nkv, int hd,
            const int32_t* off, const int32_t* cells, int n0, int chunks, bool grouped, float* o) {
    const int pairs = T * nh;
    if (chunks <= 1 && grouped) {
        attention_grouped_kernel<E, KV><<<dim3(1, T * nkv), nh / nkv * 32, 0, s>>>(q, K, V, nh, nkv, hd, off, cells, n0,
                                                                                 1, {}, o);
        CUDA_CHECK_LAUNCH();
        return;
    }
    if (chunks <= 1) {
        attention_kernel<E, false, KV><<<pairs, kWarps * 32, 0, s>>>(q, K, V, nh, nkv, hd, off, cells, n0, 1, o, {});
        CUDA_CHECK_LAUNCH();
        return;
    }
    const Partials part = partials_for(s);
    if (grouped)
        attention_grouped_kernel<E, KV><<<dim3(chunks, T * nkv), nh / nkv * 32, 0, s>>>(q, K, V, nh, nkv, hd, off,
                                                                                      cells, n0, chunks, part, o);
    else
        attention_kernel<E, true, KV><<<dim3(chunks, pairs), kWarps * 32, 0, s>>>(q, K, V, nh, nkv, hd, off, cells,
                                                                                  n0, chunks, o, part);
    CUDA_CHECK_LAUNCH();
    attention_merge_kernel<<<pairs, hd <= 128 ? 128 : 256, 0, s>>>(hd, chunks, part, o);
    CUDA_CHECK_LAUNCH();
}

bool env_off(const char* name) {
    const char* v = std::getenv(name);
    return v && std::string(v) == "0";
}

}  // namespace

int attention_chunks(int T, int nh, int max_cells, bool grouped) {
    static const bool split_off = env_off("STRATA_CUDA_SPLIT_ATTN");   // A/B: one block per (query, head)
    const int pairs = T * nh;
    if (pairs <= 0 || split_off) return 1;
    // About 16 warps per SM (4 blocks of 4 warps fit by registers); a chunk of one (query, head) takes 4 warps, or
    // one in the grouped kernel. A verify window (T ≤ kWindowQueries) is split as one query is: the chunks set the
    // order of a query's sums, so each query then gets the bits of a one-token pass.
    constexpr int kWindowQueries = 4;
    const int fill_pairs = T <= kWindowQueries ? nh : pairs;
    const int warps_per_chunk = grouped ? 1 : kWarps;
    if (fill_pairs * kWarps >= 16 * sm_count()) return 1;   // one block per (query, head) fills the GPU: no split
    int chunks = (16 * sm_count() + fill_pairs * warps_per_chunk - 1) / (fill_pairs * warps_per_chunk);
    if (max_cells >= 0) {   // very long lists: more chunks than fill the GPU at once, ≤ kLongWarpCells per warp
        chunks = std::max(chunks, (max_cells + kLongWarpCells * warps_per_chunk - 1) / (kLongWarpCells * warps_per_chunk));
        const int min_cells = grouped ? kMinGroupedChunkCells : kMinChunkCells;
        chunks = std::min(chunks, (max_cells + min_cells - 1) / min_cells);
    }
    chunks = std::min({chunks, kMaxChunks, kMaxPartials / pairs});
    return std::max(chunks, 1);
}

void attention(cudaStream_t s, const float* q, const float* K, const float* V, int T, int nh, int nkv, int hd,
               const int32_t* off, const int32_t* cells, int n0, float* o, int chunks, int grouped, int max_cells,
               KvType kv) {
    STRATA_CHECK(hd >= 1 && hd <= kMaxHd, "cuda attention: head dim ", hd, " is out of range 1..", kMaxHd);
    STRATA_CHECK(nkv > 0 && nh % nkv == 0, "cuda attention: ", nh, " heads do not group over ", nkv, " kv heads");
    if (!T || !nh) return;
    // Grouping by kv head measured slower on the H200 (T = 1 at 2K cells 38 vs 20 µs, T = 8 98 vs 70): off unless
    // asked for (STRATA_CUDA_GROUPED_ATTN=1, or grouped = 1).
    static const bool grouped_on = [] {
        const char* v = std::getenv("STRATA_CUDA_GROUPED_ATTN");
        return v && std::string(v) == "1";
    }();
    const int group = nh / nkv;
    const bool grouped_auto = grouped < 0;
    if (grouped_auto) grouped = group >= 2 && group <= kMaxGroup && grouped_on;
    STRATA_CHECK(!grouped || (group >= 1 && group <= kMaxGroup), "cuda attention: ", group,
                 " query heads per kv head exceed the grouped kernel's ", kMaxGroup);
    // Host-known dense lists have n0 + T − 1 cells at most; device counts are known only by the caller's bound
    // (max_cells), else not at all, and their chunks take a least number of cells each, so short lists leave the
    // later chunks empty.
    if (chunks < 0) chunks = attention_chunks(T, nh, max_cells >= 0 ? max_cells : off ? -1 : n0 + T - 1, grouped);
    if (chunks <= 1 && grouped_auto) grouped = 0;   // one block per (query, head) where no split is worth it
    STRATA_CHECK(chunks <= 1 || (chunks <= kMaxChunks && (size_t)T * nh * chunks <= (size_t)kMaxPartials),
                 "cuda attention: ", chunks, " chunks for ", T * nh, " (query, head) pairs exceed the partial buffer");
    const bool g = grouped != 0;
    auto run = [&](const auto& k, const auto& v) {
        if (hd <= 32) launch<1>(s, q, k, v, T, nh, nkv, hd, off, cells, n0, chunks, g, o);
        else if (hd <= 64) launch<2>(s, q, k, v, T, nh, nkv, hd, off, cells, n0, chunks, g, o);
        else if (hd <= 128) launch<4>(s, q, k, v, T, nh, nkv, hd, off, cells, n0, chunks, g, o);
        else launch<8>(s, q, k, v, T, nh, nkv, hd, off, cells, n0, chunks, g, o);
    };
    const size_t width = (size_t)nkv * hd;
    if (kv == KvType::f16) {
        run(KvF16{reinterpret_cast<const __half*>(K), width}, KvF16{reinterpret_cast<const __half*>(V), width});
    } else if (kv == KvType::q8) {
        const size_t row_bytes = 4 * kv_row_floats(KvType::q8, width);
        run(KvQ8{reinterpret_cast<const uint8_t*>(K), row_bytes, (int)width},
            KvQ8{reinterpret_cast<const uint8_t*>(V), row_bytes, (int)width});
    } else {
        run(KvF32{K, width}, KvF32{V, width});
    }
}

}  // namespace strata::cuda
