// Decode-sized experts in two launches (included by matmul.cu only, which uploads the i-quant grids it uses):
// gate+up+swiglu with the Q8_0 quantization of h in the same kernel, then down with the weighted sum over the pairs
// of a token (routed experts) or the sigmoid-gated add (shared expert) in the same kernel. Declared in moe_gate_up.h.
#pragma once
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "backend/cuda/kernels/matmul_q8.cuh"
#include "backend/cuda/kernels/moe_gate_up.h"
#include "backend/cuda/kernels/quant_formats.cuh"
#include "common/env.h"
#include "common/error.h"

namespace strata::cuda {

// STRATA_CUDA_Q2_PERM=0: the staged and MoE gate/up kernels dot Q2_0 with decode() against activations in their
// own order instead of decode_perm() against permuted ones (an A/B); read once.
inline bool q2_perm() {
    static const bool on = env_switch("STRATA_CUDA_Q2_PERM", true);
    return on;
}

namespace q8 {

constexpr int kDecodeWarps = 8;       // warps per block of both kernels
constexpr int kHBlock = 32;           // h is quantized in Q8_0 blocks: the down formats with ABLK 32
constexpr int kGateUpRows = 2;        // h rows per warp of the gate/up kernel (kHBlock / kGateUpRows warps a block):
                                      // 2 and 1 measured +2.7% / +1.9% decode against 4 on the H200 (r9)
constexpr int kDownRows = 1;          // output rows per warp of the down kernel (more warps in flight than 2)
constexpr int kDownSplit = 4;         // warps sharing one down row: +4% decode against 1, 2 about even (r9)
// A lane's chunks are written out in predicated batches of these sizes, so a batch's loads are issued together (the
// terms are still added in chunk order). r15: gate/up 10.30 -> 9.23 us, down 9.30 -> 8.35; a gate/up batch of 4
// took the Q2_0 kernel to 82 registers, one 512-thread block an SM.
constexpr int kGateUpBatch = 2;
constexpr int kDownBatch = 4;
constexpr size_t kFusedXMax = 40 * 1024;   // shared memory for x quantized in the gate/up kernel (act.q null)

// Block (g, p): rows 32g … 32g + 31 of pair p's gate and up. Pairs p < P are routed: matrix ids[p] (or mats_g[p] /
// mats_u[p], or the one matrix when both are null), activation row p / act_div. Pairs p ≥ P are the shared expert's
// (sh, when sh.gate is set): token p − P's row through sh.gate / sh.up. Each warp takes ROWS rows (32 / ROWS lanes a
// row, 32 / ROWS warps a block), lane s of a row chunks s, s + 32 / ROWS, … (an activation chunk loaded once serves
// the warp's rows). h = silu(g)·u as swiglu,
// then quantized by warp 0 with quantize_act's arithmetic into hq [pairs, rows] / hd [pairs, rows / 32]. With sh.gvec,
// block column gridDim.x − 1 instead computes gate_out[p − P] = σ(x[p − P] · gvec) for the shared pairs (f32, the
// shared expert's gate). FQ: aq / ad are ignored and the block quantizes its activation row of x into shared memory
// itself (quantize_act's arithmetic, the same bits).
template <class F, bool FQ, int ROWS = kGateUpRows, bool PERM_ON = true>
__global__ void __launch_bounds__(kHBlock / ROWS * 32)
moe_gate_up_q8h_kernel(const uint8_t* __restrict__ Wg, const uint8_t* __restrict__ Wu, size_t row_bytes, int rows,
                       int n, size_t mat_stride, const int32_t* __restrict__ ids, int act_div, int P, SharedPairs sh,
                       const int8_t* __restrict__ aq, const float* __restrict__ ad, const float* __restrict__ x,
                       float* __restrict__ gate_out, int8_t* __restrict__ hq, float* __restrict__ hd,
                       const uint8_t* const* __restrict__ mats_g, const uint8_t* const* __restrict__ mats_u) {
    using Q = QInt<F>;
    constexpr int kLanes = 32 / ROWS;
    __shared__ uint4 smem[GridSmem<F>::kWords];
    __shared__ float hs[kHBlock];
    pdl_launch_dependents();
    pdl_wait();
    ids = pdl_dep(ids);
    aq = pdl_dep(aq);
    ad = pdl_dep(ad);
    x = pdl_dep(x);
    mats_g = pdl_dep(mats_g);
    mats_u = pdl_dep(mats_u);
    const int p = blockIdx.y;
    const bool shared = p >= P;   // uniform per block
    const int arow = shared ? p - P : p / act_div;
    if (sh.gvec && blockIdx.x == gridDim.x - 1) {
        if (!shared) return;
        float d = 0.0f;
        for (int i = threadIdx.x; i < n; i += blockDim.x) d += x[(size_t)arow * n + i] * sh.gvec[i];
        d = block_sum(d);
        if (threadIdx.x == 0) gate_out[p - P] = 1.0f / (1.0f + expf(-d));   // as unary(sigmoid)
        return;
    }
    if (shared) {
        Wg = sh.gate;
        Wu = sh.up;
        ids = nullptr;
    } else if (mats_g) {   // matrix tables: a null pair is the CPU's (the down kernel skips it); uniform per block
        Wg = mats_g[p];
        Wu = mats_u[p];
        if (!Wg) return;
        ids = nullptr;
    }
    const void* grid = stage_grid<F>(smem);
    // FQ with Q8_0 blocks: one thread a block quantizes (quantize_row32_to_smem), in decode_perm's order with the
    // blocks' Σa for formats that have one (PERM: Q2_0, 8 byte permutes and 8 dp4a a chunk fewer).
    constexpr bool PERM = PERM_ON && FQ && Q::kActPerm && F::ABLK == 32;
    const int* asums = nullptr;
    if constexpr (FQ && F::ABLK == 32) {
        extern __shared__ uint4 act_smem[];
        int8_t* q = (int8_t*)act_smem;
        float* d = (float*)(q + n);
        int* sums = (int*)(d + n / 32);
        quantize_row32_to_smem<PERM>(x + (size_t)arow * n, n, q, d, PERM ? sums : nullptr);
        __syncthreads();
        aq = q;
        ad = d;
        asums = sums;
    } else if constexpr (FQ) {
        quantize_rows_to_smem<F::ABLK>(x, n, arow, arow, aq, ad);
    }
    constexpr int kSub = F::QK / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, s = lane % kLanes;
    const int local = warp * ROWS + lane / kLanes;   // row within the block's 32
    const int row = blockIdx.x * kHBlock + local;
    const int units = n / 32, nd = n / F::ABLK;
    const size_t off = (ids ? (size_t)__ldg(ids + p) * mat_stride : 0) + (size_t)row * row_bytes;
    const int8_t* xq = aq + (FQ ? 0 : (size_t)arow * n);
    const float* xd = ad + (FQ ? 0 : (size_t)arow * nd);
    float ag = 0.0f, au = 0.0f;
    for (int u0 = s; u0 < units; u0 += kLanes * kGateUpBatch) {
#pragma unroll
        for (int kb = 0; kb < kGateUpBatch; ++kb) {
            const int u = u0 + kLanes * kb;
            if (u >= units) continue;
            const size_t b = off + (size_t)(u / kSub) * F::BYTES;
            IChunk cg, cu;
            const int4* q4 = (const int4*)(xq + 32 * u);
            const int4 lo = load_act4<FQ>(q4), hi = load_act4<FQ>(q4 + 1);
            const int a[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
            const float da = load_act_scale<FQ>(xd + (32 * u) / F::ABLK);
            if constexpr (PERM) {
                Q::decode_perm(Wg + b, u % kSub, grid, cg);
                Q::decode_perm(Wu + b, u % kSub, grid, cu);
                const int asum = asums[u];
                ag += chunk_term_sum<Q>(cg, a, da, asum);
                au += chunk_term_sum<Q>(cu, a, da, asum);
            } else {
                Q::decode(Wg + b, u % kSub, grid, cg);
                Q::decode(Wu + b, u % kSub, grid, cu);
                ag += chunk_term<Q>(cg, a, da);
                au += chunk_term<Q>(cu, a, da);
            }
        }
    }
    ag = group_sum<kLanes>(ag);
    au = group_sum<kLanes>(au);
    if (s == 0) hs[local] = ag / (1.0f + expf(-ag)) * au;   // as swiglu
    __syncthreads();
    if (warp == 0) {
        float v[1] = {hs[lane]};
        const int blk = blockIdx.x;
        quantize_act_values<kHBlock>(v, lane, hq + (size_t)p * rows + (size_t)blk * kHBlock,
                                     hd + (size_t)p * (rows / kHBlock) + blk);
    }
}

// Block (b, t): output rows of token t, kDownRows per warp (32 / kDownRows lanes a row). Row r: y[t, r] = Σ_j w_j ·
// (down_{e_j}[r] · h[t·k + j]) over the token's k routed pairs, w_j = wts[t·k + j], e_j = ids[t·k + j] (or the one
// matrix when ids is null), plus with Ws the shared pair P + t: gates[t] · (Ws[r] · h[P + t]); accumulate: y[t, r] +=
// the sum instead of =. The SPLIT warps of a row take the (pair, chunk) units s, s + 32·SPLIT, … of all the token's
// pairs (warp i of the row from unit 32·i), so a row of n = 640 (20 chunks a pair) keeps every lane busy; the warps'
// sums are added in warp order.
template <class F, int SPLIT = kDownSplit>
__global__ void __launch_bounds__(kDecodeWarps * 32)
moe_down_combine_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int rows, int n, size_t mat_stride,
                        const int32_t* __restrict__ ids, const int8_t* __restrict__ hq, const float* __restrict__ hd,
                        const float* __restrict__ wts, int k, int P, const uint8_t* __restrict__ Ws,
                        const float* __restrict__ gates, bool accumulate, float* __restrict__ y,
                        const uint8_t* const* __restrict__ mats) {
    using Q = QInt<F>;
    constexpr int kLanes = 32 / kDownRows;
    static_assert(kDownRows == 1 || SPLIT == 1, "a row split over warps is one row a warp");
    __shared__ uint4 smem[GridSmem<F>::kWords];
    __shared__ float split_part[kDecodeWarps];
    pdl_launch_dependents();
    pdl_wait();
    ids = pdl_dep(ids);
    hq = pdl_dep(hq);
    hd = pdl_dep(hd);
    wts = pdl_dep(wts);
    gates = pdl_dep(gates);
    mats = pdl_dep(mats);
    const void* grid = stage_grid<F>(smem);
    constexpr int kSub = F::QK / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % SPLIT;
    const int s = lane % kLanes + part * kLanes;   // this lane's first unit: SPLIT warps share a row
    const int row = (blockIdx.x * (kDecodeWarps / SPLIT) + warp / SPLIT) * kDownRows + lane / kLanes;
    const int t = blockIdx.y;
    const int units = n / 32, total = (k + (Ws ? 1 : 0)) * units;
    float acc = 0.0f;
    if (row < rows) {
        for (int v0 = s; v0 < total; v0 += kLanes * SPLIT * kDownBatch)
#pragma unroll
        for (int kb = 0; kb < kDownBatch; ++kb) {
            const int v = v0 + kLanes * SPLIT * kb;
            if (v >= total) continue;
            const int j = v / units, c = v - j * units;
            const bool sj = j == k;   // the shared pair
            const int p = sj ? P + t : t * k + j;
            const uint8_t* base = sj ? Ws : mats ? mats[p] : W + (ids ? (size_t)__ldg(ids + p) * mat_stride : 0);
            if (!base) continue;   // the CPU's pair
            const uint8_t* wr = base + (size_t)row * row_bytes;
            IChunk cw;
            Q::decode(wr + (size_t)(c / kSub) * F::BYTES, c % kSub, grid, cw);
            const int4* q4 = (const int4*)(hq + (size_t)p * n + 32 * c);
            const int4 lo = __ldg(q4), hi = __ldg(q4 + 1);
            const int a[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
            const float da = __ldg(hd + (size_t)p * (n / kHBlock) + c);
            acc += __ldg(sj ? gates + t : wts + p) * chunk_term<Q>(cw, a, da);
        }
    }
    acc = group_sum<kLanes>(acc);
    if constexpr (SPLIT > 1) {   // the row's warps' sums in warp order
        if (lane == 0) split_part[warp] = acc;
        __syncthreads();
        if (part != 0) return;
        for (int i = 1; i < SPLIT; ++i) acc += split_part[warp + i];
    }
    if (lane % kLanes == 0 && row < rows) {
        float* yr = y + (size_t)t * rows + row;
        *yr = accumulate ? *yr + acc : acc;
    }
}

}  // namespace q8

namespace {

// STRATA_CUDA_MOE_DECODE=0 turns the two-launch decode path off (A/B in bench/cuda_kernels/run.sh); read once.
bool moe_decode_enabled() {
    static const bool on = env_switch("STRATA_CUDA_MOE_DECODE", true);
    return on;
}

// Bytes of moe_decode's scratch: h quantized (int8 [P, I], f32 scales [P, I / 32]) and the gates [P].
size_t decode_scratch_bytes(int P, int I) {
    const size_t q = ((size_t)P * I + 15) / 16 * 16;
    return q + (size_t)P * (I / q8::kHBlock) * sizeof(float) + (size_t)P * sizeof(float);
}

// Launch shapes of the two kernels (A/B on the H200; read once): STRATA_CUDA_MOE_GATE_UP_ROWS = h rows a warp of the
// gate/up kernel (4, 2 or 1; fewer rows = more lanes a row and more warps a block), STRATA_CUDA_MOE_DOWN_SPLIT =
// warps sharing one output row of the down kernel (1, 2 or 4).
int env_choice(const char* name, int fallback, std::initializer_list<int> allowed) {
    const char* v = std::getenv(name);
    if (!v) return fallback;
    const int x = std::atoi(v);
    for (int a : allowed)
        if (a == x) return x;
    return fallback;
}
int gate_up_rows() {
    static const int rows = env_choice("STRATA_CUDA_MOE_GATE_UP_ROWS", q8::kGateUpRows, {1, 2, 4});
    return rows;
}
// Warps a down row: STRATA_CUDA_MOE_DOWN_SPLIT = 1, 2 or 4; unset, the largest of 4, 2 whose grid for one token
// (rows · split / kDecodeWarps blocks) the GPU holds at once, else 1. A second wave of these short blocks costs
// their whole latency again: at split 4 the 2,560 rows of a token are 1,280 blocks where 792 fit (40 registers).
// Decided from one token's grid whatever the call's T: the split sets the order of a row's sums, so a verify window
// gives each token the bits of a one-token pass.
template <class F>
int down_split_for(int64_t rows) {
    static const int forced = env_choice("STRATA_CUDA_MOE_DOWN_SPLIT", 0, {1, 2, 4});
    if (forced) return forced;
    static std::atomic<unsigned> known4{0}, known2{0};
    auto blocks = [&](int split) {
        const int64_t per_block = q8::kDecodeWarps / split * q8::kDownRows;
        return (rows + per_block - 1) / per_block;
    };
    if (blocks(4) <= blocks_at_once(q8::moe_down_combine_kernel<F, 4>, q8::kDecodeWarps * 32, 0, known4)) return 4;
    if (blocks(2) <= blocks_at_once(q8::moe_down_combine_kernel<F, 2>, q8::kDecodeWarps * 32, 0, known2)) return 2;
    return 1;
}

struct DecodeScratch {
    int8_t* hq;
    float* hd;
    float* gates;
};

DecodeScratch split_scratch(void* scratch, size_t bytes, int P, int I) {
    STRATA_CHECK(bytes >= decode_scratch_bytes(P, I), "cuda moe_decode: scratch of ", bytes, " bytes for ", P,
                 " pairs of ", I, " needs ", decode_scratch_bytes(P, I));
    DecodeScratch d;
    d.hq = static_cast<int8_t*>(scratch);
    d.hd = reinterpret_cast<float*>(d.hq + ((size_t)P * I + 15) / 16 * 16);
    d.gates = d.hd + (size_t)P * (I / q8::kHBlock);
    return d;
}

// Both launches, each format picked by its own switch. Routed pairs: T·k (k = 0: none) with gate / up / down and
// weights wts; with sh.gate the T shared pairs follow (weights σ(x · sh.gvec) from the gate/up kernel's extra
// column). gate / up / down also give the formats and shapes of the shared matrices. act.q null: the gate/up kernel
// quantizes x itself.
void run_decode(cudaStream_t s, const MatmulArgs& gate, const MatmulArgs& up, const MatmulArgs& down, ActQ8 act,
                const float* x, const float* wts, int T, int k, const SharedPairs& sh, bool accumulate,
                void* scratch, size_t bytes, float* y) {
    const int P = T * k, pairs = P + (sh.gate ? T : 0), I = (int)gate.rows;
    const DecodeScratch d = split_scratch(scratch, bytes, pairs, I);
    with_block_format(gate.type, [&](auto f) {
        using F = decltype(f);
        if constexpr (QInt<F>::kHas) {
            const dim3 grid((unsigned)(I / q8::kHBlock) + (sh.gvec ? 1u : 0u), (unsigned)pairs);
            const int rows_a_warp = gate_up_rows();
            auto launch = [&](auto kernel, size_t smem) {
                launch_kernel(kernel, grid, q8::kHBlock / rows_a_warp * 32, smem, s, pdl_enabled(), gate.w, up.w,
                              gate.row_bytes, I, gate.n, gate.mat_stride, gate.ids, gate.act_div, P, sh, act.q, act.d,
                              x, d.gates, d.hq, d.hd, gate.mats, up.mats);
            };
            auto launch_rows = [&](auto fq, size_t smem) {
                constexpr bool FQ = decltype(fq)::value;
                if constexpr (FQ && QInt<F>::kActPerm) {
                    if (!q2_perm() && rows_a_warp == q8::kGateUpRows) {
                        launch(q8::moe_gate_up_q8h_kernel<F, FQ, q8::kGateUpRows, false>, smem);
                        return;
                    }
                }
                if (rows_a_warp == 1) launch(q8::moe_gate_up_q8h_kernel<F, FQ, 1>, smem);
                else if (rows_a_warp == 2) launch(q8::moe_gate_up_q8h_kernel<F, FQ, 2>, smem);
                else launch(q8::moe_gate_up_q8h_kernel<F, FQ, 4>, smem);
            };
            if (act.q) {
                launch_rows(std::false_type{}, 0);
            } else {
                // x quantized and, with Q8_0 blocks, the blocks' Σa (moe_gate_up_q8h_kernel)
                const size_t smem = q8::fused_act_bytes(1, gate.n, F::ABLK) +
                                    (F::ABLK == 32 ? (size_t)(gate.n / 32) * sizeof(int) : 0);
                STRATA_CHECK(x && smem <= q8::kFusedXMax, "cuda moe_decode: no quantized input, and x of ", gate.n,
                             " values needs ", smem, " bytes of shared memory to quantize in the kernel");
                launch_rows(std::true_type{}, smem);
            }
            CUDA_CHECK_LAUNCH();
        }
    });
    with_block_format(down.type, [&](auto f) {
        using F = decltype(f);
        if constexpr (QInt<F>::kHas && F::ABLK == q8::kHBlock) {
            const int split = down_split_for<F>(down.rows);
            const unsigned per_block = q8::kDecodeWarps / split * q8::kDownRows;
            const dim3 grid((unsigned)((down.rows + per_block - 1) / per_block), (unsigned)T);
            auto launch = [&](auto kernel) {
                launch_kernel(kernel, grid, q8::kDecodeWarps * 32, 0, s, pdl_enabled(), down.w, down.row_bytes,
                              (int)down.rows, down.n, down.mat_stride, down.ids, d.hq, d.hd, wts, k, P, sh.down,
                              d.gates, accumulate, y, down.mats);
            };
            if (split == 4) launch(q8::moe_down_combine_kernel<F, 4>);
            else if (split == 2) launch(q8::moe_down_combine_kernel<F, 2>);
            else launch(q8::moe_down_combine_kernel<F, 1>);
            CUDA_CHECK_LAUNCH();
        }
    });
}

}  // namespace

bool moe_decode_supported(const MatmulArgs& gate, const MatmulArgs& up, const MatmulArgs& down, int P) {
    if (!moe_decode_enabled() || P <= 0 || P > kMoeDecodeMaxPairs) return false;
    if (gate.type != up.type || gate.row_bytes != up.row_bytes || gate.rows != up.rows || gate.n != up.n ||
        gate.mat_stride != up.mat_stride || gate.ids != up.ids || gate.act_div != up.act_div || gate.ids != down.ids ||
        !gate.mats != !up.mats || !gate.mats != !down.mats)
        return false;
    if (down.n != gate.rows || gate.rows % q8::kHBlock != 0 || gate.rows > 65535 * q8::kHBlock) return false;
    bool gate_ok = false, down_ok = false;
    with_block_format(gate.type, [&](auto f) {
        using F = decltype(f);
        gate_ok = QInt<F>::kHas && gate.n % F::QK == 0;
    });
    with_block_format(down.type, [&](auto f) {
        using F = decltype(f);
        down_ok = QInt<F>::kHas && F::ABLK == q8::kHBlock && down.n % F::QK == 0;
    });
    return gate_ok && down_ok;
}

size_t moe_decode_scratch_bytes(int P, int I) { return decode_scratch_bytes(P, I); }

void moe_decode(cudaStream_t s, const MatmulArgs& gate, const MatmulArgs& up, const MatmulArgs& down, ActQ8 act,
                const float* x, const float* wts, int T, int k, void* scratch, size_t scratch_bytes, float* y) {
    STRATA_CHECK(moe_decode_supported(gate, up, down, T * k), "cuda moe_decode: ", T, " tokens × ", k, " of ",
                 ggml_type_name(gate.type), " / ", ggml_type_name(down.type), " experts is not a decode-path call");
    run_decode(s, gate, up, down, act, x, wts, T, k, SharedPairs{}, false, scratch, scratch_bytes, y);
}

void shexp_decode(cudaStream_t s, const MatmulArgs& gate, const MatmulArgs& up, const MatmulArgs& down, ActQ8 act,
                  const float* x, const float* gvec, int T, void* scratch, size_t scratch_bytes, float* y) {
    STRATA_CHECK(moe_decode_supported(gate, up, down, T) && !gate.ids && gate.act_div == 1,
                 "cuda shexp_decode: ", T, " tokens of ", ggml_type_name(gate.type), " / ", ggml_type_name(down.type),
                 " is not a decode-path call");
    run_decode(s, gate, up, down, act, x, nullptr, T, 0, SharedPairs{gate.w, up.w, down.w, gvec}, true, scratch,
               scratch_bytes, y);
}

bool moe_shexp_decode_supported(const MatmulArgs& gate, const MatmulArgs& up, const MatmulArgs& down,
                                const MatmulArgs& sgate, const MatmulArgs& sup, const MatmulArgs& sdown, int T, int k) {
    auto alike = [](const MatmulArgs& a, const MatmulArgs& b) {
        return a.type == b.type && a.rows == b.rows && a.n == b.n && a.row_bytes == b.row_bytes;
    };
    return alike(gate, sgate) && alike(up, sup) && alike(down, sdown) && !sgate.ids && !sdown.ids &&
           moe_decode_supported(gate, up, down, T * (k + 1)) && moe_decode_supported(sgate, sup, sdown, T);
}

void moe_shexp_decode(cudaStream_t s, const MatmulArgs& gate, const MatmulArgs& up, const MatmulArgs& down,
                      const MatmulArgs& sgate, const MatmulArgs& sup, const MatmulArgs& sdown, const float* gvec,
                      ActQ8 act, const float* x, const float* wts, int T, int k, void* scratch, size_t scratch_bytes,
                      float* y) {
    STRATA_CHECK(moe_shexp_decode_supported(gate, up, down, sgate, sup, sdown, T, k) && gvec,
                 "cuda moe_shexp_decode: ", T, " tokens × ", k, " of ", ggml_type_name(gate.type), " / ",
                 ggml_type_name(down.type), " experts with their shared expert is not a decode-path call");
    run_decode(s, gate, up, down, act, x, wts, T, k, SharedPairs{sgate.w, sup.w, sdown.w, gvec}, false, scratch,
               scratch_bytes, y);
}

}  // namespace strata::cuda
