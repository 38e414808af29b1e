// Backend::hyper_read of T ≤ 4 tokens in one launch: one thread-block cluster (sm_90) of CS = 16 blocks (8 where 16
// cannot be placed) instead of hyper_read.cu's two kernels at T = 1 (~8 + ~6 µs a call on the H200, 29% of a decode
// pass's kernel time, bench/results/2026-12-04-h200-waves) or three at T = 3, 4 (a speculative verify window; ~30-65
// µs at T = 4-8, tests/gpu/results/2026-11-30-round2). The weights are read once for all T tokens.
// STRATA_CUDA_HR_CLUSTER=1 (off by default until measured).
//
//   0. each block starts copying its weights into shared memory (cp.async): its ⌈R / CS⌉ rows of the down and inject
//      matrices (whole rows of n·H) and the n·J up rows of its J = H / CS columns; they depend on no earlier kernel
//      (what shared memory cannot hold is asked into L2 instead);
//   1. every block reads all of X (with the pending injection of hyper_inject_read), the streams' sums of squares,
//      and quantizes the normalised X into shared memory (down_prologue_one_pass's arithmetic, the whole of X), token
//      by token;
//   2. its rows: down / inject row · xn, then a = silu(v / n) or inj = 2σ(v / n); cluster barrier (after which inj is
//      written: it may be the inj_prev every block read in step 1);
//   3. every block gathers the r values of a from the blocks that computed them (distributed shared memory) and
//      quantizes them (mix_prologue's arithmetic); the streams after the injection go back to X at its columns (every
//      block has read X by the barrier);
//   4. its columns: m = σ(up row · a) (8 lanes a row), u[j] = (1/n) Σ_s m · xn in stream order.
// No scratch memory and no second launch; the partial sums of the two-kernel path (per column chunk) become whole-row
// dots, so values differ from it in the last bits (float order), as the one-pass prologue's do.
// Included by hyper_read.cu inside its unnamed namespace, after PendingInject, load_x4 / load_x1, unit_stats_quad and
// quantize_quad.

namespace cl {

namespace cg = cooperative_groups;

constexpr int kThreads = 512;            // a block: 16 warps
constexpr int kWarps = kThreads / 32;
constexpr int kMaxNH = 16384;            // n·H: the quantized xn of every block in shared memory
constexpr int kMaxQuads = kMaxNH / 4 / kThreads;
constexpr int kMaxTokens = 4;            // T of one call (NT: 1 or 4)
constexpr int kMaxRowsBlock = 64;        // ⌈R / CS⌉ ≤ this (R ≤ 520: CS 16 → 33, CS 8 → 65 is refused)
constexpr int kUpGroup = 8;              // lanes an up row (r = 320: 10 chunks of 32, at most 2 a lane)

struct Args {
    const float* X;
    const float* w;                      // hc_norm [w_len], or null
    int w_len, n, H, r, R, rows_pb, J;   // R = r + n with inj; rows_pb = ⌈R / CS⌉; J = H / CS
    float eps;
    const uint8_t* down;
    size_t down_rb;
    const uint8_t* inject;
    size_t inj_rb;
    const uint8_t* up;
    size_t up_rb;
    int T;                               // tokens (≤ the kernel's NT)
    PendingInject pi;                    // inj / y of hyper_inject_read (x_new unused), or none
    float* X_out;                        // the streams after the injection, written back (with pi.y)
    float* u;                            // [T, H]
    float* inj;                          // [T, n], or null
    bool stage_down, stage_up;           // weights copied into shared memory (else read from global memory)
};

// Dynamic shared memory, in bytes from its start (each part 16-byte aligned).
struct Smem {
    size_t xq = 0, xd, unit_amax, unit_ss, xb, down, up, total;
};
__host__ __device__ inline size_t align16(size_t b) { return (b + 15) & ~(size_t)15; }
__host__ __device__ inline Smem smem_layout(int T, int n, int H, int blk, int J, int rows_pb, size_t down_rb,
                                            size_t up_rb, bool stage_down, bool stage_up) {
    const size_t nH = (size_t)n * H;
    Smem s;
    s.xd = align16((size_t)T * nH);                                        // xq [T, nH] int8
    s.unit_amax = s.xd + align16((size_t)T * (nH / blk) * sizeof(float));  // xd [T, nH / blk]
    s.unit_ss = s.unit_amax + align16(nH / 32 * sizeof(float));            // one token's at a time
    s.xb = s.unit_ss + align16(nH / 32 * sizeof(float));
    s.down = s.xb + align16((size_t)T * n * J * sizeof(float));            // xb [T, n, J]
    s.up = s.down + (stage_down ? align16((size_t)rows_pb * down_rb) : 0);
    s.total = s.up + (stage_up ? align16((size_t)n * J * up_rb) : 0);
    return s;
}

// The cluster's barrier in two halves: arrive once this block no longer reads the others' shared memory, wait before
// it leaves (so that none leaves while another still reads its shared memory).
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

template <class FD, int BLK, class FU, int NT>
__global__ void __launch_bounds__(kThreads, 1) hr_cluster_kernel(Args a) {
    static_assert(BLK == 32 || BLK == 256, "Q8 activations");
    static_assert(NT >= 1 && NT <= kMaxTokens, "tokens");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900   // clusters: sm_90 on (the host launches it only there)
    constexpr int kSub = FD::QK / 32, kSubU = FU::QK / 32, B = FU::ABLK;
    extern __shared__ int4 smem4[];
    uint8_t* smem = (uint8_t*)smem4;
    __shared__ float iv[NT][kMaxStreams];
    __shared__ float vals[NT][kMaxRowsBlock];        // this block's rows: a (silu) or inj values, by token
    __shared__ __align__(16) int8_t aq[NT][kMaxRank];   // a quantized for the up rows
    __shared__ float ad[NT][kMaxRank / 32];
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();
    const int T = NT == 1 ? 1 : a.T, n = a.n, H = a.H, nH = n * H, J = a.J, tid = threadIdx.x, lane = tid & 31,
              warp = tid >> 5;
    const Smem L = smem_layout(T, n, H, BLK, J, a.rows_pb, a.down_rb, a.up_rb, a.stage_down, a.stage_up);
    int8_t* xq = (int8_t*)(smem + L.xq);             // [T, nH]
    float* xd = (float*)(smem + L.xd);               // [T, nH / BLK]
    float* unit_amax = (float*)(smem + L.unit_amax);
    float* unit_ss = (float*)(smem + L.unit_ss);
    float* xb = (float*)(smem + L.xb);               // [T, n, J]: this block's columns of the streams, then m · xn
    uint8_t* down_s = smem + L.down;
    uint8_t* up_s = smem + L.up;
    const int row0 = rank * a.rows_pb, row1 = min(a.R, row0 + a.rows_pb), rows = max(0, row1 - row0);
    const int j0 = rank * J, nJ = n * J;

    // 0. the weights, as two groups of copies (down and inject rows, then up rows)
    if (a.stage_down) {
        const int dr1 = min(row1, a.r), ir0 = max(row0, a.r);
        if (dr1 > row0) {
            const size_t bytes = (size_t)(dr1 - row0) * a.down_rb;
            const uint8_t* src = a.down + (size_t)row0 * a.down_rb;
            for (size_t o = 16 * (size_t)tid; o < bytes; o += 16 * kThreads) cp_async16(down_s + o, src + o);
        }
        if (row1 > ir0) {
            const size_t bytes = (size_t)(row1 - ir0) * a.inj_rb;
            const uint8_t* src = a.inject + (size_t)(ir0 - a.r) * a.inj_rb;
            uint8_t* dst = down_s + (size_t)(ir0 - row0) * a.down_rb;
            for (size_t o = 16 * (size_t)tid; o < bytes; o += 16 * kThreads) cp_async16(dst + o, src + o);
        }
    }
    cp_async_commit();
    if (a.stage_up) {
        const size_t bytes = (size_t)J * a.up_rb;
        for (int s = 0; s < n; ++s) {
            const uint8_t* src = a.up + ((size_t)s * H + j0) * a.up_rb;
            for (size_t o = 16 * (size_t)tid; o < bytes; o += 16 * kThreads) cp_async16(up_s + s * bytes + o, src + o);
        }
    }
    cp_async_commit();
    // Weights not staged (shared memory too small, e.g. ~99 KiB on consumer cards): their lines asked into L2 now.
    if (!a.stage_down)
        for (int lr = 0; lr < rows; ++lr) {
            const int row = row0 + lr;
            const uint8_t* wr = row < a.r ? a.down + (size_t)row * a.down_rb : a.inject + (size_t)(row - a.r) * a.inj_rb;
            for (size_t o = 128 * (size_t)tid; o < a.down_rb; o += 128 * kThreads) prefetch_l2(wr + o);
        }
    if (!a.stage_up)
        for (int s = 0; s < n; ++s) {
            const uint8_t* src = a.up + ((size_t)s * H + j0) * a.up_rb;
            for (size_t o = 128 * (size_t)tid; o < (size_t)J * a.up_rb; o += 128 * kThreads) prefetch_l2(src + o);
        }
    pdl_launch_dependents();
    pdl_wait();   // X, inj, y (as the previous kernel's programmatic dependent: only the weights came before)
    const float* X = pdl_dep(a.X);
    PendingInject pi = a.pi;
    pi.inj = pdl_dep(pi.inj);
    pi.y = pdl_dep(pi.y);

    // 1. X, token by token: a 32-input unit is 8 consecutive threads' float4s; its Σx² and max |x·w| by shuffles
    for (int i = tid; i < T * nJ; i += kThreads) {   // this block's columns, for step 4 and the write-back
        const int t = i / nJ, s = i % nJ / J, j = j0 + i % J;
        xb[i] = load_x1(X, pi, t, s * H + j, n, H);
    }
    const int quads = nH / 4;
    for (int t = 0; t < T; ++t) {
        float4 y[kMaxQuads];
#pragma unroll
        for (int it = 0; it < kMaxQuads; ++it) {
            const int q = it * kThreads + tid, c = 4 * q;
            const bool valid = q < quads;
            const float4 x = valid ? load_x4(X, pi, t, c, n, H) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            float4 wv = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
            if (valid && a.w)
                wv = make_float4(a.w[c % a.w_len], a.w[(c + 1) % a.w_len], a.w[(c + 2) % a.w_len],
                                 a.w[(c + 3) % a.w_len]);
            y[it] = unit_stats_quad(x, wv, valid, q, unit_ss, unit_amax);
        }
        __syncthreads();
        if (warp < n) {
            float ss = 0.0f;
            for (int k = lane; k < H / 32; k += 32) ss += unit_ss[warp * (H / 32) + k];
            ss = warp_sum(ss);
            if (lane == 0) iv[t][warp] = 1.0f / sqrtf(ss / H + a.eps);
        }
        __syncthreads();
#pragma unroll
        for (int it = 0; it < kMaxQuads; ++it) {
            const int q = it * kThreads + tid;
            if (q >= quads) break;
            quantize_quad<BLK>(y[it], iv[t][4 * q / H], unit_amax, q, xq + (size_t)t * nH, xd + (size_t)t * (nH / BLK));
        }
        __syncthreads();   // the unit tables are the next token's
    }
    cp_async_wait<1>();   // this thread's down copies (the up copies may still run)
    __syncthreads();

    // 2. this block's rows, a warp a row, every token at once
    const float inv_n = 1.0f / (float)n;
    const int units = nH / 32;
    for (int lr = warp; lr < rows; lr += kWarps) {
        const int row = row0 + lr;
        const uint8_t* wr = a.stage_down ? down_s + (size_t)lr * a.down_rb
                            : row < a.r  ? a.down + (size_t)row * a.down_rb
                                         : a.inject + (size_t)(row - a.r) * a.inj_rb;
        float acc[NT];
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
#pragma unroll 2
        for (int uu = lane; uu < units; uu += 32) {
            const auto act = [&](int t, int (&q)[8]) -> float {
                const int4* q4 = (const int4*)(xq + (size_t)t * nH + 32 * uu);
                const int4 lo = q4[0], hi = q4[1];
                q[0] = lo.x; q[1] = lo.y; q[2] = lo.z; q[3] = lo.w;
                q[4] = hi.x; q[5] = hi.y; q[6] = hi.z; q[7] = hi.w;
                return xd[(size_t)t * (nH / BLK) + (32 * uu) / BLK];
            };
            QDot<FD>::template dot<NT>(wr + (size_t)(uu / kSub) * FD::BYTES, uu % kSub, QDot<FD>::global_grid(), act,
                                       T, acc);
        }
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const float v = warp_sum(acc[t]) * inv_n;
            if (lane == 0 && t < T) vals[t][lr] = row < a.r ? v / (1.0f + expf(-v)) : 1.0f / (1.0f + expf(-v)) * 2.0f;
        }
    }
    cluster.sync();   // every block's rows are done, and every block has read X and inj_prev
    if (a.inj)        // inj may be inj_prev (the model's call): written only once every block has read it
        for (int i = tid; i < T * rows; i += kThreads) {
            const int t = i / rows, lr = i % rows;
            if (row0 + lr >= a.r) a.inj[t * n + row0 + lr - a.r] = vals[t][lr];
        }

    // 3. a from its blocks, quantized (mix_prologue's Q8 arithmetic); the injected streams back to X
    for (int b = warp; b < T * (a.r / B); b += kWarps) {
        const int t = b / (a.r / B), bt = b % (a.r / B);
        float v[B / 32];
#pragma unroll
        for (int k = 0; k < B / 32; ++k) {
            const int i = bt * B + lane + 32 * k, owner = i / a.rows_pb;
            v[k] = *cluster.map_shared_rank(&vals[t][i - owner * a.rows_pb], owner);
        }
        const float d = quantize_act_block<B>(v, lane, &aq[t][bt * B]);
        if (lane == 0) ad[t][bt] = d;
    }
    cluster_arrive();   // this block reads no other block's shared memory from here on
    if (pi.y && a.X_out)
        for (int i = tid; i < T * nJ; i += kThreads) {
            const int t = i / nJ, s = i % nJ / J;
            a.X_out[(size_t)t * nH + (size_t)s * H + j0 + i % J] = xb[i];
        }
    cp_async_wait<0>();
    __syncthreads();

    // 4. this block's columns: group g of kUpGroup lanes takes up rows i = s·J + jl, every token at once
    const int g = tid % kUpGroup, groups = kThreads / kUpGroup;
    for (int i0 = 0; i0 < nJ; i0 += groups) {
        const int i = i0 + tid / kUpGroup, ic = min(i, nJ - 1);   // every lane of a group runs the shuffles
        const int s = ic / J, j = j0 + ic % J;
        const uint8_t* wr = a.stage_up ? up_s + (size_t)ic * a.up_rb : a.up + ((size_t)s * H + j) * a.up_rb;
        float acc[NT];
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
        for (int c = g; c < a.r / 32; c += kUpGroup) {
            const auto act = [&](int t, int (&q)[8]) -> float {
                const int4* q4 = (const int4*)(&aq[t][32 * c]);
                const int4 lo = q4[0], hi = q4[1];
                q[0] = lo.x; q[1] = lo.y; q[2] = lo.z; q[3] = lo.w;
                q[4] = hi.x; q[5] = hi.y; q[6] = hi.z; q[7] = hi.w;
                return ad[t][(32 * c) / B];
            };
            QDot<FU>::template dot<NT>(wr + (size_t)(c / kSubU) * FU::BYTES, c % kSubU, QDot<FU>::global_grid(), act,
                                       T, acc);
        }
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const float dot = group_sum<kUpGroup>(acc[t]);
            if (g == 0 && i < nJ && t < T) {
                const int col = s * H + j;
                const float wv = a.w ? a.w[col % a.w_len] : 1.0f;
                float& x = xb[(size_t)t * nJ + i];
                x = 1.0f / (1.0f + expf(-dot)) * (x * wv * iv[t][s]);
            }
        }
    }
    __syncthreads();
    for (int k = tid; k < T * J; k += kThreads) {
        const int t = k / J, jl = k % J;
        float sum = 0.0f;
        for (int s = 0; s < n; ++s) sum += xb[(size_t)t * nJ + s * J + jl];
        a.u[(size_t)t * H + j0 + jl] = sum / (float)n;
    }
    cluster_wait();
#endif
}

}  // namespace cl
