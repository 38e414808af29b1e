// Backend::gdn_block's steps between the projections in two kernels: conv + silu + the q/k l2 norms (with the
// history update), and the recurrence with its β/g gates and the gated RMSNorm (optionally also quantizing its output
// for the out projection). Same formulas and summation order per value as the primitive ops (causal_conv, unary,
// l2_norm, gdn_recurrent, rms_norm, mul), except the split recurrences at d = 128 (recurrent_gated_split_kernel and,
// on sm_90, recurrent_gated_cluster_kernel). On sm_90 at d = 128 the cluster kernel can also do the first kernel's
// work (gdn_conv_fold_supported), the same bits in one launch.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"
#include "common/env.h"

namespace strata::cuda {

namespace {

constexpr int kMaxTaps = 8;

__device__ __forceinline__ float sigmoid_f(float v) { return 1.0f / (1.0f + expf(-v)); }

// One token of a channel's causal conv and silu: taps oldest first (as CpuBackend::causal_conv) over the window's
// K − 1 values and xt; the window then moves on by one.
__device__ __forceinline__ float conv_silu_step(float xt, float (&win)[kMaxTaps], const float (&taps)[kMaxTaps],
                                                int K) {
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxTaps; ++i)
        if (i < K) acc += taps[i] * (i < K - 1 ? win[i] : xt);
#pragma unroll
    for (int i = 0; i + 1 < kMaxTaps; ++i)   // K − 1 ≤ 7 values
        if (i < K - 2) win[i] = win[i + 1];
        else if (i == K - 2) win[i] = xt;
    return acc / (1.0f + expf(-acc));         // silu
}

// One block per head-sized group of d channels (q heads, k heads, then v heads), one thread per channel; the
// channel's K − 1 history values stay in registers while the block walks the T tokens.
__global__ void conv_norm_kernel(const float* __restrict__ qkv, int ld, int T, int nk, int d, int cd,
                                 const float* __restrict__ w, int K, float* __restrict__ hist, float* __restrict__ conv) {
    pdl_launch_dependents();
    pdl_wait();
    qkv = pdl_dep(qkv);
    hist = pdl_dep(hist);
    const int group = blockIdx.x, j = threadIdx.x;
    const bool active = j < d;
    const int c = group * d + j;
    float win[kMaxTaps], taps[kMaxTaps];
#pragma unroll
    for (int i = 0; i < kMaxTaps; ++i) {
        win[i] = active && i < K - 1 ? hist[(size_t)i * cd + c] : 0.0f;
        taps[i] = active && i < K ? w[(size_t)c * K + i] : 0.0f;
    }
    // q heads: l2 norm scaled by 1/√d; k heads: l2 norm; v heads: none.
    const bool is_q = group < nk, is_k = !is_q && group < 2 * nk;
    const float scale = is_q ? 1.0f / sqrtf((float)d) : 1.0f;
    for (int t = 0; t < T; ++t) {
        const float xt = active ? qkv[(size_t)t * ld + c] : 0.0f;
        float v = conv_silu_step(xt, win, taps, K);
        if (is_q || is_k) {
            const float ss = block_sum(active ? v * v : 0.0f);
            v *= scale / sqrtf(ss + 1e-6f);                  // transformers' l2norm eps, as block_gdn.cpp
        }
        if (active) conv[(size_t)t * cd + c] = v;
    }
    if (active)
#pragma unroll
        for (int i = 0; i < kMaxTaps; ++i)
            if (i < K - 1) hist[(size_t)i * cd + c] = win[i];
}

// Sum over the W = blockDim.x / HPB threads of this thread's head (W a multiple of 32); every thread gets its sum.
template <int HPB>
__device__ __forceinline__ float head_sum(float v, int head) {
    if constexpr (HPB == 1) return block_sum(v);
    __shared__ float partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, per_head = (blockDim.x >> 5) / HPB;
    v = warp_sum(v);
    __syncthreads();                       // partial may still be read by a previous call
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    float r = 0.0f;
    for (int w = 0; w < per_head; ++w) r += partial[head * per_head + w];
    return r;
}

__device__ __forceinline__ float block_max(float v) {
    __shared__ float partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    return warp_max(lane < nwarps ? partial[lane] : 0.0f);
}

// o's value at column c of row t quantized as quantize_act does (matmul_q8.cuh's quantize_act_values, the same
// arithmetic): QBLK 32 = one Q8_0 block per warp (fp16-rounded scale), 256 = one Q8_K block per block of 256 threads.
template <int QBLK>
__device__ __forceinline__ void quantize_o(float v, const GdnGatedArgs& a, int t, int c) {
    const float amax = QBLK == 32 ? warp_max(fabsf(v)) : block_max(fabsf(v));
    const float dd = amax / 127.0f;
    const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
    float r = rintf(v * id);
    if (QBLK == 256) r = fminf(127.0f, fmaxf(-127.0f, r));
    const int vd = a.nv * a.d;
    a.q[(size_t)t * vd + c] = (int8_t)(int)r;
    if (c % QBLK == 0) a.qd[(size_t)t * (vd / QBLK) + c / QBLK] = QBLK == 32 ? __half2float(__float2half_rn(dd)) : dd;
}

// Token t's gates of value head h: β = σ(beta) and the decay exp(softplus(alpha + dt_bias) · (−exp(A_log))).
__device__ __forceinline__ void token_gates(const GdnGatedArgs& a, int t, int h, float dt_bias, float decay_rate,
                                            float& b, float& decay) {
    b = sigmoid_f(a.beta[(size_t)t * a.ld_beta + h]);
    const float ga = a.alpha[(size_t)t * a.ld_alpha + h] + dt_bias;
    const float g = (ga > 20.0f ? ga : log1pf(expf(ga))) * decay_rate;   // softplus, then · (−exp(A_log))
    decay = expf(g);
}

// The gated RMSNorm's output of column j of head h (rs = rsqrt(mean(out²) + eps) of the head): out · rs · norm · σ(z)
// into o, and quantized with QBLK > 0 (every thread of the warp calls this then).
template <int QBLK>
__device__ __forceinline__ void gated_output(float out, float rs, float norm_w, const GdnGatedArgs& a, int t, int h,
                                             int j, bool active, float* __restrict__ o) {
    const int d = a.d;
    float v = 0.0f;
    if (active) {
        const float z = a.z[(size_t)t * a.ld_z + (size_t)h * d + j];
        v = out * rs * norm_w * sigmoid_f(z);
        o[(size_t)t * a.nv * d + (size_t)h * d + j] = v;
    }
    if constexpr (QBLK > 0) quantize_o<QBLK>(v, a, t, h * d + j);
}

// Token row's q and k of key head kh (d values each; k after the nk·d = kd q values) into the block's qs / ks, after
// the block's last reads of them (and of anything else read before the previous barrier).
__device__ __forceinline__ void stage_qk(const float* row, int kh, int d, int kd, float* qs, float* ks) {
    __syncthreads();
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        qs[i] = row[(size_t)kh * d + i];
        ks[i] = row[kd + (size_t)kh * d + i];
    }
    __syncthreads();
}

// HPB value heads per block (W = blockDim.x / HPB threads each), one thread per state column j (as gdn_recurrent.cu);
// q, k, v read from conv. QBLK > 0: o is also written quantized (a.q, a.qd).
template <int DK, int HPB, int QBLK>
__global__ void recurrent_gated_kernel(GdnGatedArgs a, int T, float* __restrict__ S, float* __restrict__ o) {
    __shared__ float qs[HPB][DK], ks[HPB][DK];
    const int W = blockDim.x / HPB, r = threadIdx.x / W, j = threadIdx.x % W;
    const int h = blockIdx.x * HPB + r, d = a.d, kh = h % a.nk;
    const bool active = j < d;
    const int kd = a.nk * d, cd = 2 * kd + a.nv * d;
    float* Sh = S + (size_t)h * d * d;
    float s[DK];
#pragma unroll
    for (int i = 0; i < DK; ++i) s[i] = active && i < d ? Sh[(size_t)i * d + j] : 0.0f;
    const float dt_bias = a.dt_bias[h], decay_rate = a.a[h];
    const float norm_w = active ? a.norm[((size_t)h * d + j) % a.norm_len] : 0.0f;   // column h·d + j, as rms_norm
    for (int t = 0; t < T; ++t) {
        const float* row = a.conv + (size_t)t * cd;
        __syncthreads();                                       // previous token's q/k are no longer read
        for (int i = j; i < d; i += W) {
            qs[r][i] = row[(size_t)kh * d + i];
            ks[r][i] = row[kd + (size_t)kh * d + i];
        }
        __syncthreads();
        float b, decay;
        token_gates(a, t, h, dt_bias, decay_rate, b, decay);
        float kv = 0.0f;
#pragma unroll
        for (int i = 0; i < DK; ++i)
            if (i < d) {
                s[i] *= decay;
                kv += s[i] * ks[r][i];
            }
        const float delta = active ? b * (row[2 * kd + (size_t)h * d + j] - kv) : 0.0f;
        float out = 0.0f;
#pragma unroll
        for (int i = 0; i < DK; ++i)
            if (i < d) {
                s[i] += ks[r][i] * delta;
                out += s[i] * qs[r][i];
            }
        // Gated RMSNorm of the head: out · rsqrt(mean(out²) + eps) · norm · σ(z)
        const float ss = head_sum<HPB>(active ? out * out : 0.0f, r);
        const float rs = 1.0f / sqrtf(ss / d + a.eps);
        gated_output<QBLK>(out, rs, norm_w, a, t, h, j, active, o);   // QBLK > 0: every thread is active
    }
    if (active)
#pragma unroll
        for (int i = 0; i < DK; ++i)
            if (i < d) Sh[(size_t)i * d + j] = s[i];
}

// The same recurrence with each state column split over R threads (R · W threads a block, one head): thread (part,
// j) keeps rows part·DK/R … of column j, so the two dots of a column (k·S and q·S) are R chains of DK/R products
// added in part order through shared memory, instead of one chain of DK (the one-thread-per-column kernel runs 4
// warps on 48 of the GPU's multiprocessors with two 128-long dependent chains a token). Part 0's warps are the
// columns in order, so the gated RMSNorm and o's quantization are the kernel above's. The dots' order of additions
// differs from the primitive ops' (the same rounding, not the same bits).
template <int DK, int R, int QBLK>
__global__ void __launch_bounds__(512)   // R · W = 4 · 128
recurrent_gated_split_kernel(GdnGatedArgs a, int T, float* __restrict__ S, float* __restrict__ o) {
    constexpr int RD = DK / R;   // rows of a column per thread
    __shared__ float qs[DK], ks[DK];
    __shared__ float kvp[R][DK], outp[R][DK];
    const int W = blockDim.x / R, part = threadIdx.x / W, j = threadIdx.x % W;
    const int h = blockIdx.x, d = a.d, kh = h % a.nk, i0 = part * RD;
    const bool active = j < d;
    const int kd = a.nk * d, cd = 2 * kd + a.nv * d;
    float* Sh = S + (size_t)h * d * d;
    float s[RD];
#pragma unroll
    for (int i = 0; i < RD; ++i) s[i] = active && i0 + i < d ? Sh[(size_t)(i0 + i) * d + j] : 0.0f;
    const float dt_bias = a.dt_bias[h], decay_rate = a.a[h];
    const float norm_w = active ? a.norm[((size_t)h * d + j) % a.norm_len] : 0.0f;   // column h·d + j, as rms_norm
    // Column j's sum of the R threads' parts, added in part order (buf is rewritten only after the next barrier).
    const auto column_total = [&](float (&buf)[R][DK], float mine) {
        if (active) buf[part][j] = mine;
        __syncthreads();
        float total = 0.0f;
#pragma unroll
        for (int p = 0; p < R; ++p) total += active ? buf[p][j] : 0.0f;
        return total;
    };
    for (int t = 0; t < T; ++t) {
        const float* row = a.conv + (size_t)t * cd;
        stage_qk(row, kh, d, kd, qs, ks);
        float b, decay;
        token_gates(a, t, h, dt_bias, decay_rate, b, decay);
        float kv = 0.0f;
#pragma unroll
        for (int i = 0; i < RD; ++i)
            if (i0 + i < d) {
                s[i] *= decay;
                kv += s[i] * ks[i0 + i];
            }
        kv = column_total(kvp, kv);
        const float delta = active ? b * (row[2 * kd + (size_t)h * d + j] - kv) : 0.0f;
        float out = 0.0f;
#pragma unroll
        for (int i = 0; i < RD; ++i)
            if (i0 + i < d) {
                s[i] += ks[i0 + i] * delta;
                out += s[i] * qs[i0 + i];
            }
        out = column_total(outp, out);
        // Gated RMSNorm of the head over part 0's columns: out · rsqrt(mean(out²) + eps) · norm · σ(z)
        const float ss = block_sum(part == 0 && active ? out * out : 0.0f);
        const float rs = 1.0f / sqrtf(ss / d + a.eps);
        if (part == 0) gated_output<QBLK>(out, rs, norm_w, a, t, h, j, active, o);   // whole warps: W % 32 == 0
    }
    if (active)
#pragma unroll
        for (int i = 0; i < RD; ++i)
            if (i0 + i < d) Sh[(size_t)(i0 + i) * d + j] = s[i];
}

// The same recurrence at d = DK with each head over C blocks (sm_90): block rank c keeps columns c·W … c·W + W − 1
// (W = DK / C = 32) of the head's state, each column split over R threads as in the kernel above (R chains of DK / R
// products). The split kernel keeps a head's 64 KB state on one multiprocessor (32 of them for 32 heads); here C
// times as many share the reads and the dependent chains. The gated RMSNorm's Σ out² of the head is its C blocks'
// sums (warp 0 holds a block's 32 columns) read through distributed shared memory, added in rank order, so every
// block of the head gets the same bits. Warp 0 is one Q8_0 block of o (columns h·d + c·W …).
//
// CONV (a.conv null): the causal conv, silu and q/k l2 norms of gdn_conv_norm done here from the raw projection
// rows a.qkv, so that kernel's launch goes. A cluster is then a key head's G = nv / nk value heads (C·G blocks,
// value head kh + nk·g for block rank g·C + c: the heads that share key head kh = h % nk): each block computes the
// 2·DK q/k channels of kh (thread i: channel i of q, then k; the same sums as conv_norm_kernel) and part 0 the v
// channels of its columns. Every block reads the history before the cluster's first barrier and the history moves
// on after its last: kh's q/k rows by cluster rank 0, a block's v channels by that block.
template <int DK, int C, int R, int QBLK, bool CONV>
__global__ void __launch_bounds__(DK / C * R)
recurrent_gated_cluster_kernel(GdnGatedArgs a, int T, float* __restrict__ S, float* __restrict__ o) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    constexpr int W = DK / C, RD = DK / R;
    static_assert(W == 32, "warp 0 holds the block's columns");
    static_assert(!CONV || DK / C * R == 2 * DK, "CONV: one thread per q/k channel of the key head");
    pdl_launch_dependents();
    pdl_wait();
    a.conv = pdl_dep(a.conv);
    a.qkv = pdl_dep(a.qkv);
    a.hist = pdl_dep(a.hist);
    a.beta = pdl_dep(a.beta);
    a.alpha = pdl_dep(a.alpha);
    a.z = pdl_dep(a.z);
    S = pdl_dep(S);
    __shared__ float qs[DK], ks[DK];
    __shared__ float kvp[R][W], outp[R][W];
    __shared__ float block_ss[2];   // this block's Σ out², by token parity (a token's value is read after the next
                                    // token's cluster barrier at the latest)
    cg::cluster_group cluster = cg::this_cluster();
    const int crank = (int)cluster.block_rank(), rank = crank % C, head0 = crank - rank;   // head0: rank of c = 0
    const int part = threadIdx.x / W, jl = threadIdx.x % W;
    const int d = DK, i0 = part * RD, j = rank * W + jl;
    int h, kh;
    if constexpr (CONV) {
        kh = blockIdx.x / (C * (a.nv / a.nk));
        h = kh + a.nk * (crank / C);
    } else {
        h = blockIdx.x / C;
        kh = h % a.nk;
    }
    const int kd = a.nk * d, cd = 2 * kd + a.nv * d;
    // CONV: this thread's q/k channel and, in part 0, its column's v channel, with their taps and history windows.
    const int cqk = threadIdx.x < DK ? kh * d + threadIdx.x : kd + kh * d + (threadIdx.x - DK);
    const int cv = 2 * kd + h * d + j;
    float win_qk[kMaxTaps], taps_qk[kMaxTaps], win_v[kMaxTaps], taps_v[kMaxTaps];
    __shared__ float vs[CONV ? W : 1];
    __shared__ float qk_part[CONV ? 2 * DK / 32 : 1];
    if constexpr (CONV) {
#pragma unroll
        for (int i = 0; i < kMaxTaps; ++i) {
            win_qk[i] = i < a.K - 1 ? a.hist[(size_t)i * cd + cqk] : 0.0f;
            taps_qk[i] = i < a.K ? a.conv_w[(size_t)cqk * a.K + i] : 0.0f;
            win_v[i] = part == 0 && i < a.K - 1 ? a.hist[(size_t)i * cd + cv] : 0.0f;
            taps_v[i] = part == 0 && i < a.K ? a.conv_w[(size_t)cv * a.K + i] : 0.0f;
        }
    }
    float* Sh = S + (size_t)h * d * d;
    float s[RD];
#pragma unroll
    for (int i = 0; i < RD; ++i) s[i] = Sh[(size_t)(i0 + i) * d + j];
    const float dt_bias = a.dt_bias[h], decay_rate = a.a[h];
    const float norm_w = a.norm[((size_t)h * d + j) % a.norm_len];   // column h·d + j, as rms_norm
    const auto column_total = [&](float (&buf)[R][W], float mine) {
        buf[part][jl] = mine;
        __syncthreads();
        float total = 0.0f;
#pragma unroll
        for (int p = 0; p < R; ++p) total += buf[p][jl];
        return total;
    };
    for (int t = 0; t < T; ++t) {
        float vj;   // column j's v
        if constexpr (CONV) {
            // conv_norm_kernel's arithmetic: silu(conv), then q · (1/√d) / ‖q‖ and k / ‖k‖ (block_sum's order over
            // each half's DK / 32 warps)
            const float* raw = a.qkv + (size_t)t * a.ld_qkv;
            const int half = threadIdx.x / DK, lane = threadIdx.x & 31;
            float v = conv_silu_step(raw[cqk], win_qk, taps_qk, a.K);
            const float ss = warp_sum(v * v);
            __syncthreads();   // the previous token's qs, ks, vs and qk_part are no longer read
            if (lane == 0) qk_part[threadIdx.x >> 5] = ss;
            if (part == 0) vs[jl] = conv_silu_step(raw[cv], win_v, taps_v, a.K);
            __syncthreads();
            const float tot = warp_sum(lane < DK / 32 ? qk_part[half * (DK / 32) + lane] : 0.0f);
            v *= (half == 0 ? 1.0f / sqrtf((float)d) : 1.0f) / sqrtf(tot + 1e-6f);
            (half == 0 ? qs : ks)[threadIdx.x % DK] = v;
            __syncthreads();
            vj = vs[jl];
        } else {
            const float* row = a.conv + (size_t)t * cd;
            stage_qk(row, kh, d, kd, qs, ks);
            vj = row[2 * kd + (size_t)h * d + j];
        }
        float b, decay;
        token_gates(a, t, h, dt_bias, decay_rate, b, decay);
        float kv = 0.0f;
#pragma unroll
        for (int i = 0; i < RD; ++i) {
            s[i] *= decay;
            kv += s[i] * ks[i0 + i];
        }
        kv = column_total(kvp, kv);
        const float delta = b * (vj - kv);
        float out = 0.0f;
#pragma unroll
        for (int i = 0; i < RD; ++i) {
            s[i] += ks[i0 + i] * delta;
            out += s[i] * qs[i0 + i];
        }
        out = column_total(outp, out);
        if (part == 0) {
            const float ss = warp_sum(out * out);
            if (jl == 0) block_ss[t & 1] = ss;
        }
        cluster.sync();
        if (part == 0) {
            float ss = 0.0f;
            for (int c = 0; c < C; ++c) ss += *cluster.map_shared_rank(&block_ss[t & 1], head0 + c);
            const float rs = 1.0f / sqrtf(ss / d + a.eps);
            gated_output<QBLK>(out, rs, norm_w, a, t, h, j, true, o);
        }
    }
#pragma unroll
    for (int i = 0; i < RD; ++i) Sh[(size_t)(i0 + i) * d + j] = s[i];
    cluster.sync();   // no block leaves while another may still read its block_ss (CONV: or the history)
    if constexpr (CONV) {
#pragma unroll
        for (int i = 0; i < kMaxTaps; ++i) {
            if (i >= a.K - 1) break;
            if (crank == 0) a.hist[(size_t)i * cd + cqk] = win_qk[i];
            if (part == 0) a.hist[(size_t)i * cd + cv] = win_v[i];
        }
    }
#endif
}

constexpr int kGdnCluster = 4;        // blocks a head (32 columns each)
constexpr int kGdnClusterParts = 8;   // threads a column (16 rows each): 256 threads a block

// STRATA_CUDA_GDN_CLUSTER=0: the one-block-a-head split kernel instead of the cluster kernel (A/B); read once. The
// cluster kernel needs sm_90.
bool gdn_cluster() {
    static const bool on = env_switch("STRATA_CUDA_GDN_CLUSTER", true) && device_cc_major() >= 9;
    return on;
}

// The launch configuration of the cluster kernel: nv·C blocks in clusters of C (CONV: C · nv / nk, a key head's).
template <int QBLK, bool CONV>
cudaLaunchConfig_t cluster_config(cudaStream_t s, const GdnGatedArgs& a, cudaLaunchAttribute (&attr)[2]) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(a.nv * kGdnCluster));
    cfg.blockDim = dim3(128 / kGdnCluster * kGdnClusterParts);
    cfg.stream = s;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)(CONV ? kGdnCluster * (a.nv / a.nk) : kGdnCluster);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl_enabled() ? 2 : 1;
    return cfg;
}

template <int QBLK, bool CONV>
void launch_cluster(cudaStream_t s, const GdnGatedArgs& a, int T, float* S, float* o) {
    cudaLaunchAttribute attr[2];
    const cudaLaunchConfig_t cfg = cluster_config<QBLK, CONV>(s, a, attr);
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, recurrent_gated_cluster_kernel<128, kGdnCluster, kGdnClusterParts, QBLK, CONV>,
                                  a, T, S, o));
}

// Whether the CONV cluster kernel can run for nk key and nv value heads here: clusters of C · nv / nk blocks (12
// for the published 16 / 48 heads: above the portable 8, allowed on sm_90 by opting in) that the GPU can place.
template <int QBLK>
bool conv_cluster_fits(const GdnGatedArgs& a) {
    auto kernel = recurrent_gated_cluster_kernel<128, kGdnCluster, kGdnClusterParts, QBLK, true>;
    const int size = kGdnCluster * (a.nv / a.nk);
    if (size > 8) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    cudaLaunchAttribute attr[2];
    const cudaLaunchConfig_t cfg = cluster_config<QBLK, true>(nullptr, a, attr);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();   // an unsupported size: not an error of the pass
        return false;
    }
    return clusters > 0;
}

inline int threads_for_head(int d) { return (d + 31) / 32 * 32; }

// STRATA_CUDA_GDN_SPLIT=0: the recurrence one thread per state column (an A/B of the split kernel); read once.
bool gdn_split() {
    static const bool on = env_switch("STRATA_CUDA_GDN_SPLIT", true);
    return on;
}

}  // namespace

bool gdn_fused_supported(int d, int K) { return d >= 1 && d <= 128 && K >= 1 && K <= kMaxTaps; }

void gdn_conv_norm(cudaStream_t s, const float* qkv, int ld, int T, int nk, int nv, int d, const float* w, int K,
                   float* hist, float* conv) {
    STRATA_CHECK(gdn_fused_supported(d, K), "cuda gdn_conv_norm: head dim ", d, " or conv kernel ", K,
                 " is outside 1..128 / 1..", kMaxTaps);
    const int cd = (2 * nk + nv) * d;
    STRATA_CHECK(ld >= cd, "cuda gdn_conv_norm: row stride ", ld, " is below the ", cd, " conv channels");
    if (!T || !cd) return;
    launch_kernel(conv_norm_kernel, 2 * nk + nv, threads_for_head(d), 0, s, pdl_enabled(), qkv, ld, T, nk, d, cd, w, K,
                  hist, conv);
    CUDA_CHECK_LAUNCH();
}

// Q8_0 only: the Q8_K form (two heads per 256-block) gave y 1e-7 off the separate quantization on the H200
// (tests/gpu/results/2026-11-30-round2: gdn_block quantized o IQ2_XS), so the out matmul quantizes Q8_K itself.
// STRATA_CUDA_GDN_CONV_FOLD=0 (or gdn_set_conv_fold(0)): gdn_conv_norm as its own kernel (an A/B of the fold).
std::atomic<int> g_conv_fold{-1};

void gdn_set_conv_fold(int mode) { g_conv_fold.store(mode < 0 ? -1 : mode ? 1 : 0); }

bool gdn_conv_fold_supported(const GdnGatedArgs& a) {
    int on = g_conv_fold.load();
    if (on < 0) {
        const char* v = std::getenv("STRATA_CUDA_GDN_CONV_FOLD");
        on = v && std::strcmp(v, "0") == 0 ? 0 : 1;
        g_conv_fold.store(on);
    }
    if (!on || a.d != 128 || a.qblk == 256 || !gdn_split() || !gdn_cluster() || a.nk < 1 || a.nv % a.nk != 0 ||
        a.K < 1 || a.K > kMaxTaps || a.nv / a.nk > 16 / kGdnCluster)
        return false;
    // Whether the GPU can place such clusters: asked once per (nk, nv, qblk) shape.
    static std::mutex mu;
    static std::map<std::tuple<int, int, int>, bool> fits;
    std::lock_guard<std::mutex> lock(mu);
    const auto key = std::make_tuple(a.nk, a.nv, a.qblk);
    auto it = fits.find(key);
    if (it == fits.end()) it = fits.emplace(key, a.qblk == 32 ? conv_cluster_fits<32>(a) : conv_cluster_fits<0>(a)).first;
    return it->second;
}

int gdn_quantize_block(int d, int nv, int blk) {
    (void)nv;
    if (blk == 32 && d % 32 == 0 && d <= 128) return 32;
    return 0;
}

void gdn_recurrent_gated(cudaStream_t s, const GdnGatedArgs& a, int T, float* S, float* o) {
    STRATA_CHECK(a.d >= 1 && a.d <= 128, "cuda gdn_recurrent_gated: head dim ", a.d, " is outside 1..128");
    STRATA_CHECK(a.norm_len > 0, "cuda gdn_recurrent_gated: the norm weight is empty");
    if (!T || !a.nv) return;
    if (!a.conv) {   // the conv folded in: the cluster kernel only
        STRATA_CHECK(gdn_conv_fold_supported(a) && a.qkv && a.conv_w && a.hist, "cuda gdn_recurrent_gated: the conv ",
                     "cannot be folded for ", a.nk, " key and ", a.nv, " value heads of ", a.d);
        if (a.qblk == 32) launch_cluster<32, true>(s, a, T, S, o);
        else launch_cluster<0, true>(s, a, T, S, o);
        CUDA_CHECK_LAUNCH();
        return;
    }
    const int threads = threads_for_head(a.d);
    if (gdn_split() && a.d == 128 && a.qblk != 256 && gdn_cluster()) {   // 4 blocks a head, 8 threads a column
        if (a.qblk == 32) launch_cluster<32, false>(s, a, T, S, o);
        else launch_cluster<0, false>(s, a, T, S, o);
    } else if (gdn_split() && a.d > 64 && a.qblk != 256) {   // d = 128: 4 threads a column, 512 a head
        if (a.qblk == 32) recurrent_gated_split_kernel<128, 4, 32><<<a.nv, 4 * threads, 0, s>>>(a, T, S, o);
        else recurrent_gated_split_kernel<128, 4, 0><<<a.nv, 4 * threads, 0, s>>>(a, T, S, o);
    } else if (a.qblk) {
        STRATA_CHECK(a.q && a.qd && gdn_quantize_block(a.d, a.nv, a.qblk) == a.qblk, "cuda gdn_recurrent_gated: ",
                     "cannot quantize o in blocks of ", a.qblk, " for head dim ", a.d, " and ", a.nv, " heads");
        if (a.qblk == 256) recurrent_gated_kernel<128, 2, 256><<<a.nv / 2, 256, 0, s>>>(a, T, S, o);
        else if (a.d <= 32) recurrent_gated_kernel<32, 1, 32><<<a.nv, threads, 0, s>>>(a, T, S, o);
        else if (a.d <= 64) recurrent_gated_kernel<64, 1, 32><<<a.nv, threads, 0, s>>>(a, T, S, o);
        else recurrent_gated_kernel<128, 1, 32><<<a.nv, threads, 0, s>>>(a, T, S, o);
    } else if (a.d <= 16) {
        recurrent_gated_kernel<16, 1, 0><<<a.nv, threads, 0, s>>>(a, T, S, o);
    } else if (a.d <= 32) {
        recurrent_gated_kernel<32, 1, 0><<<a.nv, threads, 0, s>>>(a, T, S, o);
    } else if (a.d <= 64) {
        recurrent_gated_kernel<64, 1, 0><<<a.nv, threads, 0, s>>>(a, T, S, o);
    } else {
        recurrent_gated_kernel<128, 1, 0><<<a.nv, threads, 0, s>>>(a, T, S, o);
    }
    CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
