// Prompt-sized matmuls: a block computes a tile of TT activation rows × 64 weight rows, stepping through the inputs 64
// at a time; each step decodes the weight tile once into shared memory (f32, the block decoders of
// quant_formats.cuh) and multiplies it with the activation tile (f32 x, or the Q8 rows as int8 · scale). Routed
// experts: the pairs are sorted by expert on the device (counting sort) and each tile holds pairs of one expert.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/matmul_mmq.cuh"
#include "backend/cuda/kernels/matmul_tiled.h"
#include "backend/cuda/kernels/prompt_tile.cuh"
#include "backend/cuda/kernels/quant_formats.cuh"
#include "common/env.h"
#include "common/error.h"

namespace strata::cuda {

namespace {

constexpr int kRowsPerTile = 64;   // weight rows per block
constexpr int kStep = 64;          // inputs per step: two 32-weight chunks per row
constexpr int kThreads = 256;      // 16 × 16 threads; thread (ty, tx) owns tokens MI·ty + i and rows 4·tx + j
constexpr int kDenseTile = 64;     // activation rows per block, one matrix
constexpr int kExpertTile = 32;    // pairs per block, routed experts (a prompt chunk gives ~20 pairs per expert)

template <class F>
struct BlockChunks {   // chunk u (weights 32u … 32u + 31) of a row in block format F
    __device__ __forceinline__ static void chunk(const uint8_t* wr, int u, float* w) {
        constexpr int kSub = F::QK / 32;
        F::deq32(wr + (size_t)(u / kSub) * F::BYTES, u % kSub, w);
    }
};

enum PlainType { kF32 = 0, kF16 = 1, kBF16 = 2 };

template <int TY>
struct PlainChunks {
    __device__ __forceinline__ static void chunk(const uint8_t* wr, int u, float* w) {
#pragma unroll
        for (int e = 0; e < 32; ++e) {
            const size_t i = (size_t)32 * u + e;
            if (TY == kF32) {
                w[e] = ((const float*)wr)[i];
            } else {
                const uint16_t h = ((const uint16_t*)wr)[i];
                w[e] = TY == kF16 ? half_to_float(h) : bf16_to_float(h);
            }
        }
    }
};

// y[p, row] for the TT activation rows of this block's tile and rows r0 … r0 + 63. Tile = the pairs of
// items[blockIdx.y] (slots of `order`, weights of matrix item.x) when items is set, else rows blockIdx.y·TT … of P.
template <class D, int TT>
__global__ void __launch_bounds__(kThreads)
matmul_tiled_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t rows, int n, size_t mat_stride,
                    int act_div, const float* __restrict__ x, const int8_t* __restrict__ aq,
                    const float* __restrict__ ad, int ablk, int P, const int32_t* __restrict__ order,
                    const int4* __restrict__ items, const int32_t* __restrict__ n_items, float* __restrict__ y) {
    constexpr int MI = TT / 16;   // tile rows per thread: 4 or 2 (one float4 / float2 load per input)
    static_assert(MI == 2 || MI == 4, "tile of 32 or 64 activation rows");
    __shared__ __align__(16) float ws[kStep][kRowsPerTile];   // ws[k][r]: weight k of tile row r
    __shared__ __align__(16) float xs[kStep][TT + 4];         // xs[k][t]: input k of tile row t (+4: 16-byte rows,
                                                              // stores of 8 inputs × 4 rows per warp hit 32 banks)
    __shared__ int arow[TT];                    // activation row of tile row t, −1 past the end
    __shared__ int prow[TT];                    // output row (pair or token) of tile row t
    const int tid = threadIdx.x;
    const uint8_t* wm = prompt_tile_rows<TT>(W, mat_stride, act_div, P, order, items, n_items, arow, prow);
    if (!wm) return;
    const int64_t r0 = (int64_t)blockIdx.x * kRowsPerTile;
    __syncthreads();

    const int tx = tid & 15, ty = tid >> 4;
    const int units = n / 32, nd = aq ? n / ablk : 0;
    float acc[MI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < n; k0 += kStep) {
        if (tid < 2 * kRowsPerTile) {   // threads 0 … 127 decode one chunk each: row tid % 64, chunk tid / 64
            const int r = tid & (kRowsPerTile - 1), c = tid / kRowsPerTile;
            const int u = k0 / 32 + c;
            float w[32];
            if (r0 + r < rows && u < units) {
                D::chunk(wm + (size_t)(r0 + r) * row_bytes, u, w);
            } else {
#pragma unroll
                for (int e = 0; e < 32; ++e) w[e] = 0.0f;
            }
#pragma unroll
            for (int e = 0; e < 32; ++e) ws[32 * c + e][r] = w[e];
        }
        {   // every thread loads TT / 4 activations: warp w takes inputs 8w … 8w + 7 of tile rows lane / 8 + 4i
            const int lane = tid & 31, kk = (lane & 7) + 8 * (tid >> 5), i_in = k0 + kk;
#pragma unroll
            for (int i = 0; i < TT / 4; ++i) {
                const int t = (lane >> 3) + 4 * i;
                const int a = arow[t];
                float v = 0.0f;
                if (a >= 0 && i_in < n) {
                    const size_t at = (size_t)a * n + i_in;
                    v = aq ? (float)aq[at] * ad[(size_t)a * nd + i_in / ablk] : x[at];
                }
                xs[kk][t] = v;
            }
        }
        __syncthreads();
#pragma unroll 16
        for (int kk = 0; kk < kStep; ++kk) {
            float a[MI];
            if constexpr (MI == 4) {
                const float4 v = *reinterpret_cast<const float4*>(&xs[kk][4 * ty]);
                a[0] = v.x; a[1] = v.y; a[2] = v.z; a[3] = v.w;
            } else {
                const float2 v = *reinterpret_cast<const float2*>(&xs[kk][2 * ty]);
                a[0] = v.x; a[1] = v.y;
            }
            const float4 wv = *reinterpret_cast<const float4*>(&ws[kk][4 * tx]);
            const float b[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < MI; ++i) {
        const int p = prow[MI * ty + i];
        if (p < 0) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int64_t r = r0 + 4 * tx + j;
            if (r < rows) y[(size_t)p * rows + r] = acc[i][j];
        }
    }
}

// Counting sort of P pairs by expert, one block: histogram, scan (one warp), tile list, scatter. Shared memory: three
// arrays of E ints. Pairs keep no particular order inside an expert (each pair's sums do not depend on its slot).
__global__ void sort_by_expert_kernel(const int32_t* __restrict__ ids, int P, int E, int tile,
                                      int32_t* __restrict__ order, int4* __restrict__ items,
                                      int32_t* __restrict__ n_items) {
    extern __shared__ int sh[];
    int* cnt = sh;           // pairs per expert
    int* off = sh + E;       // first slot of each expert (then the scatter cursor)
    int* toff = sh + 2 * E;  // first tile of each expert
    const int tid = threadIdx.x;
    for (int e = tid; e < E; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int p = tid; p < P; p += blockDim.x) {
        const int e = ids[p];
        if (e >= 0 && e < E) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    if (tid < 32) {   // lane l scans experts [l·seg, l·seg + seg)
        const int seg = (E + 31) / 32, lo = min(E, tid * seg), hi = min(E, lo + seg);
        int sp = 0, st = 0;
        for (int e = lo; e < hi; ++e) {
            sp += cnt[e];
            st += (cnt[e] + tile - 1) / tile;
        }
        int ip = sp, it = st;   // inclusive scans over lanes
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int vp = __shfl_up_sync(0xffffffffu, ip, o), vt = __shfl_up_sync(0xffffffffu, it, o);
            if (tid >= o) {
                ip += vp;
                it += vt;
            }
        }
        int bp = ip - sp, bt = it - st;
        for (int e = lo; e < hi; ++e) {
            off[e] = bp;
            toff[e] = bt;
            bp += cnt[e];
            bt += (cnt[e] + tile - 1) / tile;
        }
        if (tid == 31) *n_items = it;
    }
    __syncthreads();
    for (int e = tid; e < E; e += blockDim.x)
        for (int i = 0; i * tile < cnt[e]; ++i)
            items[toff[e] + i] = make_int4(e, off[e] + i * tile, min(tile, cnt[e] - i * tile), 0);
    __syncthreads();
    for (int p = tid; p < P; p += blockDim.x) {
        const int e = ids[p];
        if (e >= 0 && e < E) order[atomicAdd(&off[e], 1)] = p;
    }
}

template <class D, int TT>
void launch(cudaStream_t s, const MatmulArgs& m, const float* x, ActQ8 act, int ablk, int P, const ExpertOrder* o,
            float* y) {
    const unsigned gx = grid_for((size_t)m.rows, kRowsPerTile);
    const unsigned gy = o ? (unsigned)o->max_items : (unsigned)((P + TT - 1) / TT);
    STRATA_CHECK(gy <= 65535, "cuda tiled matmul: ", gy, " activation tiles is out of range (P = ", P, ")");
    matmul_tiled_kernel<D, TT><<<dim3(gx, gy), kThreads, 0, s>>>(
        m.w, m.row_bytes, m.rows, m.n, m.mat_stride, m.act_div, x, act.q, act.d, ablk, P, o ? o->order : nullptr,
        o ? o->items : nullptr, o ? o->n_items : nullptr, y);
    CUDA_CHECK_LAUNCH();
}

std::atomic<int> g_mmq{-1};            // -1: STRATA_CUDA_MMQ (default on, sm_80+); tiled_set_mmq overrides
std::atomic<int> g_mmq_super{-1};      // -1: STRATA_CUDA_MMQ_SUPER (default on)
std::atomic<int64_t> g_mmq_calls{0};

// STRATA_CUDA_MMQ_SUPER=0: the tensor-core kernel turns every chunk's sums into a float, also where a super-block's
// can be summed as integers first (mmq::kSuperInt; an A/B).
bool mmq_super_on() {
    int v = g_mmq_super.load();
    if (v < 0) {
        v = env_switch("STRATA_CUDA_MMQ_SUPER", true) ? 1 : 0;
        g_mmq_super.store(v);
    }
    return v == 1;
}

// The tensor-core kernel (matmul_mmq.cuh) for format F, TT activation rows a block.
template <class F, int TT>
void launch_mmq(cudaStream_t s, const MatmulArgs& m, ActQ8 act, int P, const ExpertOrder* o, float* y) {
    const unsigned gx = grid_for((size_t)m.rows, mmq::kRows);
    const unsigned gy = o ? (unsigned)o->max_items : (unsigned)((P + TT - 1) / TT);
    STRATA_CHECK(gy <= 65535, "cuda mmq matmul: ", gy, " activation tiles is out of range (P = ", P, ")");
    auto run = [&](auto kernel) {
        kernel<<<dim3(gx, gy), mmq::kThreads, 0, s>>>(m.w, m.row_bytes, m.rows, m.n, m.mat_stride, m.act_div, act.q,
                                                      act.d, F::ABLK, P, o ? o->order : nullptr,
                                                      o ? o->items : nullptr, o ? o->n_items : nullptr, y);
    };
    if constexpr (mmq::kSuperInt<F>) {
        if (mmq_super_on()) run(mmq::matmul_mmq_kernel<F, TT, true>);
        else run(mmq::matmul_mmq_kernel<F, TT, false>);
    } else {
        run(mmq::matmul_mmq_kernel<F, TT, false>);
    }
    CUDA_CHECK_LAUNCH();
}

bool mmq_on() {
    int v = g_mmq.load();
    if (v < 0) {
        v = env_switch("STRATA_CUDA_MMQ", true) && device_cc_major() >= 8 ? 1 : 0;
        g_mmq.store(v);
    }
    return v == 1;
}

// The tensor-core kernel when it is on and takes m (an integer decoder for its format, Q8 activations whose rows
// start 16-byte aligned, rows of whole steps): true when launched.
bool try_mmq(cudaStream_t s, const MatmulArgs& m, ActQ8 act, int P, const ExpertOrder* o, float* y) {
    if (!act.q || !mmq_on() || m.n % mmq::kStep != 0 || reinterpret_cast<uintptr_t>(act.q) % 16 != 0) return false;
    bool launched = false;
    with_block_format(m.type, [&](auto f) {
        using F = decltype(f);
        if constexpr (QInt<F>::kHas) {
            if (o) launch_mmq<F, kExpertTile>(s, m, act, P, o, y);
            else launch_mmq<F, kDenseTile>(s, m, act, P, nullptr, y);
            launched = true;
        }
    });
    if (launched) g_mmq_calls.fetch_add(1, std::memory_order_relaxed);
    return launched;
}

// Calls fn(Decoder{}, activation block) for weight type t; false when the tiled kernels do not take t.
template <class Fn>
bool with_decoder(GgmlType t, Fn&& fn) {
    switch (t) {
    case GgmlType::F32: fn(PlainChunks<kF32>{}, 0); return true;
    case GgmlType::F16: fn(PlainChunks<kF16>{}, 0); return true;
    case GgmlType::BF16: fn(PlainChunks<kBF16>{}, 0); return true;
    default:
        return with_block_format(t, [&](auto f) { fn(BlockChunks<decltype(f)>{}, decltype(f)::ABLK); });
    }
}

// The block-format row length multiple (plain formats: the 32-weight chunk).
int row_multiple(GgmlType t) {
    switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q8_0: case GgmlType::Q4_0:
    case GgmlType::Q5_0: case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::IQ4_NL: return 32;
    case GgmlType::Q2_0: return 64;
    default: return 256;
    }
}

// Runs the tiled kernel of m's format (the tensor-core one where try_mmq takes it); act.q null = f32 activations.
void dispatch(cudaStream_t s, const MatmulArgs& m, const float* x, ActQ8 act, int P, const ExpertOrder* o, float* y) {
    if (try_mmq(s, m, act, P, o, y)) return;
    const bool ok = with_decoder(m.type, [&](auto d, int ablk) {
        using D = decltype(d);
        if (!ablk) act = ActQ8{};   // plain weights always multiply f32 x
        if (o) launch<D, kExpertTile>(s, m, x, act, ablk, P, o, y);
        else launch<D, kDenseTile>(s, m, x, act, ablk, P, nullptr, y);
    });
    STRATA_CHECK(ok, "cuda tiled matmul: unsupported weight type ", ggml_type_name(m.type));
}

}  // namespace

void tiled_upload_tables() {
    CUDA_CHECK(cudaMemcpyToSymbol(d_iq2xxs_grid, iq::iq2xxs_grid, sizeof(iq::iq2xxs_grid)));
    CUDA_CHECK(cudaMemcpyToSymbol(d_iq2xs_grid, iq::iq2xs_grid, sizeof(iq::iq2xs_grid)));
    CUDA_CHECK(cudaMemcpyToSymbol(d_iq2s_grid, iq::iq2s_grid, sizeof(iq::iq2s_grid)));
    CUDA_CHECK(cudaMemcpyToSymbol(d_iq3xxs_grid, iq::iq3xxs_grid, sizeof(iq::iq3xxs_grid)));
    CUDA_CHECK(cudaMemcpyToSymbol(d_iq3s_grid, iq::iq3s_grid, sizeof(iq::iq3s_grid)));
    CUDA_CHECK(cudaMemcpyToSymbol(d_ksigns_iq2xs, iq::ksigns_iq2xs, sizeof(iq::ksigns_iq2xs)));
    CUDA_CHECK(cudaMemcpyToSymbol(d_kvalues_iq4nl, iq::kvalues_iq4nl, sizeof(iq::kvalues_iq4nl)));
}

void tiled_set_mmq(int mode) {
    g_mmq.store(mode < 0 ? -1 : mode ? (device_cc_major() >= 8 ? 1 : 0) : 0);
    g_mmq_super.store(mode < 0 ? -1 : mode == 2 ? 0 : 1);
}
int64_t tiled_mmq_calls() { return g_mmq_calls.load(); }

bool tiled_enabled() {
    static const bool on = env_switch("STRATA_CUDA_TILED", true);
    return on;
}

bool tiled_supported(GgmlType t, int n) {
    return with_decoder(t, [](auto, int) {}) && n > 0 && n % row_multiple(t) == 0;
}

bool matmul_tiled(cudaStream_t s, const MatmulArgs& m, const float* x, ActQ8 act, int P, float* y) {
    if (m.ids || P < kTiledMinRows || !tiled_enabled() || !tiled_supported(m.type, m.n)) return false;
    dispatch(s, m, x, act, P, nullptr, y);
    return true;
}

size_t expert_order_bytes(int P, int E) {
    const size_t max_items = (size_t)(P + kExpertTile - 1) / kExpertTile + (size_t)std::min(P, E);
    return max_items * sizeof(int4) + (size_t)P * sizeof(int32_t) + 16;
}

ExpertOrder sort_by_expert(cudaStream_t s, const int32_t* ids, int P, int E, void* scratch) {
    STRATA_CHECK(E > 0 && E <= kMaxTiledExperts, "cuda sort_by_expert: ", E, " experts is out of range 1..",
                 kMaxTiledExperts);
    ExpertOrder o;
    o.max_items = (P + kExpertTile - 1) / kExpertTile + std::min(P, E);
    uint8_t* p = static_cast<uint8_t*>(scratch);
    o.items = reinterpret_cast<int4*>(p);   // scratch from cudaMalloc (256-byte aligned); int4 first
    p += (size_t)o.max_items * sizeof(int4);
    o.n_items = reinterpret_cast<int32_t*>(p);
    p += 16;
    o.order = reinterpret_cast<int32_t*>(p);
    sort_by_expert_kernel<<<1, 1024, (size_t)3 * E * sizeof(int), s>>>(ids, P, E, kExpertTile, o.order, o.items,
                                                                        o.n_items);
    CUDA_CHECK_LAUNCH();
    return o;
}

void matmul_tiled_experts(cudaStream_t s, const MatmulArgs& m, const ExpertOrder& o, const float* x, ActQ8 act, int P,
                          float* y) {
    STRATA_CHECK(tiled_supported(m.type, m.n), "cuda tiled experts: weight type ", ggml_type_name(m.type),
                 " with rows of ", m.n, " is not supported");
    if (m.rows == 0 || P == 0) return;
    dispatch(s, m, x, act, P, &o, y);
}

}  // namespace strata::cuda
