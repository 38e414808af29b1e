// The hyper read of up to kWindowTokens tokens as ONE kernel: a thread-block cluster a token (sm_90+), whose blocks
// meet through distributed shared memory and cluster barriers instead of a kernel boundary and a global partial table.
// Opt-in (STRATA_CUDA_HR_CLUSTER=1, or 8 / 16 to force the cluster size); the two kernels of hyper_read.cu stay the
// default until an A/B on a GPU says otherwise. Included by hyper_read.cu inside its anonymous namespace, after the
// helpers it reuses (PendingInject, load_x4, unit_stats_quad, quantize_quad).
//
// Block b of a cluster of C (cluster rank b, token z = blockIdx.x / C):
//   0. starts 16-byte async copies of its weights into shared memory, two groups: down / inject rows b·rows_a …
//      (whole rows, all n·H inputs), then the up rows of its columns j0 = b·cols_b … for every stream (where they do
//      not fit, the up rows and then the down rows too are read from global memory, asked into L2 here instead);
//   1. blocks b < P normalise chunk b of the n·H inputs (pc of them, inside one stream or whole streams): x·w and each
//      32-input unit's Σx² and max |x·w|; cluster barrier; each stream's Σx² from the chunks' shared memory (chunk
//      order), 1/rms, the chunk's Q8 form (quantize_act's arithmetic) and its f32 xn; with a pending injection
//      (hyper_inject_read) the block reads X + inj ⊗ y and writes that over X (only its own chunk: no other block
//      reads it); cluster barrier;
//   2. every block gathers the whole Q8 xn from the P chunks, then one warp a row computes its rows' dots;
//      cluster barrier;
//   3. every block reads the R dots from the cluster (a = silu(dot / n), quantized as the up format's activations;
//      block 0 writes inj = 2σ(dot / n)), then one thread an up row (s, j) of its columns: σ(up · a) · xn[s, j], and
//      u[j] = (1/n) Σ_s in stream order (and, when asked, u's Q8_0 blocks for the matmuls that read u next); a last
//      cluster barrier keeps every block's shared memory alive until the others have read it.
// Each token's cluster computes it alone, so a verify window's tokens get one-token bits by construction. The sums run
// in another order than the two kernels' (a row's dot whole instead of per chunk): the same values within float
// rounding, and within cuda_ops_test's tolerance of the CPU composition.
// (Its headers, cooperative_groups.h, map, mutex, tuple and hyper_read_cluster_layout.h (the work split and shared
// memory layout, host code a host test checks), are included at the top of hyper_read.cu.)

constexpr int kClusterThreads = 1024;   // one block an SM (its shared memory): 32 warps to hide latency
constexpr int kClusterQuads = kClusterMaxChunk / 4 / kClusterThreads;   // float4s of a chunk a thread
static_assert(kClusterMaxStreams == kMaxStreams, "hyper_read_cluster_layout.h's stream bound is the kernels'");

std::atomic<int64_t> g_cluster{0};   // calls that took the cluster kernel

template <class FD, class FU>
__global__ void __launch_bounds__(kClusterThreads)
hr_cluster_kernel(const float* X, PendingInject pi, float* X_out, const float* __restrict__ w, int w_len,
                  int n, int H, float eps, const uint8_t* __restrict__ down, const uint8_t* __restrict__ inject,
                  size_t down_rb, int r, int R, const uint8_t* __restrict__ up, size_t up_rb, ClusterLayout L,
                  float* __restrict__ u, float* inj, int8_t* __restrict__ uq, float* __restrict__ ud) {
    // X_out may be X, inj may be pi.inj; uq / ud (or null): u's Q8_0 form, as quantize_act makes it
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    constexpr int BLK = FD::ABLK;
    extern __shared__ int4 smem4[];
    __shared__ float unit_ss[kClusterMaxChunk / 32], unit_amax[kClusterMaxChunk / 32];
    __shared__ float inv_s[kMaxStreams];
    uint8_t* sm = reinterpret_cast<uint8_t*>(smem4);
    uint8_t* w_a = sm + L.w_a;
    uint8_t* w_b = sm + L.w_b;
    int8_t* xq = reinterpret_cast<int8_t*>(sm + L.xq);
    float* xd = reinterpret_cast<float*>(sm + L.xd);
    int8_t* own_q = reinterpret_cast<int8_t*>(sm + L.own_q);
    float* own_d = reinterpret_cast<float*>(sm + L.own_d);
    float* own_xn = reinterpret_cast<float*>(sm + L.own_xn);
    float* ss_own = reinterpret_cast<float*>(sm + L.ss);
    float* res = reinterpret_cast<float*>(sm + L.res);
    int8_t* aq = reinterpret_cast<int8_t*>(sm + L.aq);
    float* ad = reinterpret_cast<float*>(sm + L.ad);
    float* val = reinterpret_cast<float*>(sm + L.val);
    float* uo = reinterpret_cast<float*>(sm + L.uo);

    cg::cluster_group cluster = cg::this_cluster();
    const int b = (int)cluster.block_rank();
    const int nH = n * H, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
    if (const int z = blockIdx.x / L.C) {   // token z's rows of every array
        X += (size_t)z * nH;
        if (X_out) X_out += (size_t)z * nH;
        if (pi.y) pi.inj += z * n, pi.y += (size_t)z * H;
        u += (size_t)z * H;
        if (inj) inj += z * n;
        if (uq) uq += (size_t)z * H, ud += (size_t)z * (H / 32);
    }

    // Row `row` of the down matrix, or inject row row − r.
    const auto down_row = [&](int row) {
        return row < r ? down + (size_t)row * down_rb : inject + (size_t)(row - r) * down_rb;
    };

    // 0. This block's weights into shared memory while the prologue runs (or into L2 where they are not staged).
    {
        const int row0 = b * L.rows_a, nrows = max(0, min(L.rows_a, R - row0));
        const int words = (int)(down_rb / 16);
        for (int k = 0; k < nrows && !L.stage_a; ++k)   // a whole row is contiguous; the inject rows follow r
            prefetch_l2_lines(down_row(row0 + k), down_rb, tid, blockDim.x);
        for (int i = tid; i < nrows * words && L.stage_a; i += blockDim.x) {
            const int k = i / words, wd = i % words;
            cp_async16(w_a + (size_t)k * down_rb + 16 * (size_t)wd, down_row(row0 + k) + 16 * (size_t)wd);
        }
        cp_async_commit();   // group 1: the down rows (waited for before step 2's dots)
        const int j0 = b * L.cols_b;
        const size_t seg = (size_t)L.cols_b * up_rb;   // one stream's rows j0 … j0 + cols_b, contiguous
        const int seg_words = (int)(seg / 16);
        for (int s = 0; s < n && !L.stage_b; ++s)
            prefetch_l2_lines(up + ((size_t)s * H + j0) * up_rb, seg, tid, blockDim.x);
        for (int i = tid; i < n * seg_words && L.stage_b; i += blockDim.x) {
            const int s = i / seg_words, wd = i % seg_words;
            cp_async16(w_b + (size_t)s * seg + 16 * (size_t)wd, up + ((size_t)s * H + j0) * up_rb + 16 * (size_t)wd);
        }
        cp_async_commit();   // group 2: the up rows (still arriving during step 2)
    }

    // 1. The prologue of chunk b: x·w and the units' statistics, then (after every chunk's Σx²) the Q8 form.
    const bool chunk_owner = b < L.P;
    const int c0 = b * L.pc, quads = L.pc / 4;
    const int spc = L.pc >= H ? L.pc / H : 1;   // streams the chunk touches
    float4 y[kClusterQuads];
    if (chunk_owner) {
#pragma unroll
        for (int it = 0; it < kClusterQuads; ++it) {
            const int q = it * kClusterThreads + tid, c = c0 + 4 * q;
            const bool valid = q < quads;
            const float4 x = valid ? load_x4(X, pi, 0, c, n, H) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (valid && pi.y) reinterpret_cast<float4*>(X_out)[c / 4] = x;   // the streams after the injection
            const float4 wv = valid && w ? reinterpret_cast<const float4*>(w)[(c % w_len) / 4]
                                         : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
            y[it] = unit_stats_quad(x, wv, valid, q, unit_ss, unit_amax);
        }
        __syncthreads();
        const int units = (L.pc >= H ? H : L.pc) / 32;   // units of one stream inside the chunk
        for (int si = warp; si < spc; si += nwarps) {
            float ss = 0.0f;
            for (int k = lane; k < units; k += 32) ss += unit_ss[si * units + k];
            ss = warp_sum(ss);
            if (lane == 0) ss_own[si] = ss;
        }
    }
    cluster.sync();   // every chunk's Σx²
    if (chunk_owner) {
        if (tid < spc) {
            float ss = ss_own[tid];
            if (L.pc < H) {   // the stream's chunks in order
                const int per = H / L.pc, first = (c0 / H) * per;
                ss = 0.0f;
                for (int k = 0; k < per; ++k) ss += *cluster.map_shared_rank(ss_own, first + k);
            }
            inv_s[tid] = 1.0f / sqrtf(ss / H + eps);
        }
        __syncthreads();
#pragma unroll
        for (int it = 0; it < kClusterQuads; ++it) {
            const int q = it * kClusterThreads + tid;
            if (q >= quads) break;
            const float4 v = quantize_quad<BLK>(y[it], inv_s[L.pc >= H ? 4 * q / H : 0], unit_amax, q, own_q, own_d);
            reinterpret_cast<float4*>(own_xn)[q] = v;
        }
    }
    cluster.sync();   // every chunk's Q8 form and xn

    // 2. The whole Q8 xn from the chunks, then the down / inject dots of this block's rows.
    {
        const int words = L.pc / 16, nd = L.pc / BLK;
        for (int i = tid; i < L.P * words; i += blockDim.x)
            reinterpret_cast<int4*>(xq)[i] =
                cluster.map_shared_rank(reinterpret_cast<int4*>(own_q), i / words)[i % words];
        for (int i = tid; i < L.P * nd; i += blockDim.x) xd[i] = cluster.map_shared_rank(own_d, i / nd)[i % nd];
    }
    cp_async_wait<1>();   // this thread's down rows are in; then everyone's
    __syncthreads();
    {
        constexpr int kSub = FD::QK / 32;
        const int units = nH / 32, row0 = b * L.rows_a;
        for (int k = warp; k < L.rows_a && row0 + k < R; k += nwarps) {
            const uint8_t* wr = L.stage_a ? w_a + (size_t)k * down_rb : down_row(row0 + k);
            float acc[1] = {0.0f};
            for (int uu = lane; uu < units; uu += 32) {
                const auto act = [&](int, int (&a)[8]) -> float {
                    const int4* q4 = reinterpret_cast<const int4*>(xq + 32 * uu);
                    const int4 lo = q4[0], hi = q4[1];
                    a[0] = lo.x; a[1] = lo.y; a[2] = lo.z; a[3] = lo.w;
                    a[4] = hi.x; a[5] = hi.y; a[6] = hi.z; a[7] = hi.w;
                    return xd[(32 * uu) / BLK];
                };
                QDot<FD>::template dot<1>(wr + (size_t)(uu / kSub) * FD::BYTES, uu % kSub, QDot<FD>::global_grid(),
                                          act, 1, acc);
            }
            const float v = warp_sum(acc[0]);
            if (lane == 0) res[k] = v;
        }
    }
    cluster.sync();   // every row's dot

    // 3. a = silu(dot / n) in the up format's Q8 form (warp per activation block), inj, then the up rows.
    {
        const float inv_n = 1.0f / (float)n;
        constexpr int B = FU::ABLK, V = B / 32;
        for (int ab = warp; ab < r / B; ab += nwarps) {
            float v[V];
#pragma unroll
            for (int k = 0; k < V; ++k) {
                const int i = ab * B + lane + 32 * k;
                const float d = *cluster.map_shared_rank(res + i % L.rows_a, i / L.rows_a) * inv_n;
                v[k] = d / (1.0f + expf(-d));
            }
            const float d = quantize_act_block<B>(v, lane, aq + ab * B);
            if (lane == 0) ad[ab] = d;
        }
        cp_async_wait<0>();   // the up rows too
        if (inj && b == 0 && tid < n) {
            const int i = r + tid;
            const float d = *cluster.map_shared_rank(res + i % L.rows_a, i / L.rows_a);
            inj[tid] = 1.0f / (1.0f + expf(-(d * inv_n))) * 2.0f;
        }
        __syncthreads();
        const int j0 = b * L.cols_b, ncols = L.cols_b;
        for (int i = tid; i < ncols * n; i += blockDim.x) {   // i = jl·n + s
            const int jl = i / n, s = i % n;
            float acc[1] = {0.0f};
            const uint8_t* wr = L.stage_b ? w_b + ((size_t)s * L.cols_b + jl) * up_rb
                                          : up + ((size_t)s * H + j0 + jl) * up_rb;
            up_row_dot<FU, true, false, 1, 1>(wr, r, 0, 1, nullptr, aq, ad, acc);
            const int c = s * H + j0 + jl;   // the input this up row weights
            const float xv = *cluster.map_shared_rank(own_xn + c % L.pc, c / L.pc);
            val[i] = 1.0f / (1.0f + expf(-acc[0])) * xv;
        }
        __syncthreads();
        for (int jl = tid; jl < ncols; jl += blockDim.x) {
            float sum = 0.0f;
            for (int k = 0; k < n; ++k) sum += val[jl * n + k];
            u[j0 + jl] = uo[jl] = sum / (float)n;
        }
        if (uq) {   // u's Q8_0 blocks of these columns (cols_b % 32 == 0): a warp a block
            __syncthreads();
            for (int ab = warp; ab < ncols / 32; ab += nwarps) {
                const float v[1] = {uo[32 * ab + lane]};
                const float d = quantize_act_block<32>(v, lane, uq + j0 + 32 * ab);
                if (lane == 0) ud[(j0 + 32 * ab) / 32] = d;
            }
        }
    }
    cluster.sync();   // no block leaves while another still reads its shared memory
#endif
}

// STRATA_CUDA_HR_CLUSTER: unset or 0 = off (the two kernels), 1 = on with the largest cluster the device runs (16,
// else 8), 8 / 16 = that size only. Read at every call (tests switch it).
int cluster_request() {
    const char* v = std::getenv("STRATA_CUDA_HR_CLUSTER");
    if (!v) return 0;
    const int k = std::atoi(v);
    return k == 1 || k == 8 || k == 16 ? k : 0;
}

// STRATA_CUDA_HR_CLUSTER_STAGE (tests): 3 / 1 / 0 = stage both phases' rows, the down rows only, none; unset: the
// most that fits. Read at every call.
int stage_request() {
    const char* v = std::getenv("STRATA_CUDA_HR_CLUSTER_STAGE");
    return v ? std::atoi(v) : -1;
}

// T clusters of C blocks of kClusterThreads with `smem` bytes each on stream s (attr: the cluster size, kept by cfg).
cudaLaunchConfig_t cluster_config(int C, int T, size_t smem, cudaStream_t s, cudaLaunchAttribute& attr) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(C * T));
    cfg.blockDim = dim3(kClusterThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = (unsigned)C;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    return cfg;
}

// Whether the device runs at least one cluster of C blocks of this kernel with `smem` bytes each (asked once per
// kernel, size and shared memory; the attributes are set on the way).
bool cluster_fits(const void* kernel, int C, size_t smem) {
    static std::mutex mu;
    static std::map<std::tuple<const void*, int, size_t>, bool> known;
    std::lock_guard lock(mu);
    const auto key = std::make_tuple(kernel, C, smem);
    if (const auto it = known.find(key); it != known.end()) return it->second;
    bool ok = false;
    int dev = 0, optin = 0;
    cudaFuncAttributes fa = {};
    if (device_cc_major() >= 9 && cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess &&
        cudaFuncGetAttributes(&fa, kernel) == cudaSuccess && smem + fa.sharedSizeBytes <= (size_t)optin) {
        // all the dynamic shared memory a block can have beside the kernel's static arrays, so that another shape's
        // smaller request cannot lower it under this one
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        optin - (int)fa.sharedSizeBytes));
        if (C > 8) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        cudaLaunchAttribute attr;
        const cudaLaunchConfig_t cfg = cluster_config(C, 1, smem, nullptr, attr);
        int clusters = 0;
        const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg);
        if (e != cudaSuccess) (void)cudaGetLastError();   // an unsupported size: not an error of the pass
        ok = e == cudaSuccess && clusters >= 1;
    }
    known[key] = ok;
    return ok;
}

// The cluster kernel for T ≤ kWindowTokens tokens when STRATA_CUDA_HR_CLUSTER asks for it and the shape, formats and
// alignment allow it; false: the caller runs the two kernels. With pi.y (hyper_inject_read) X_out is X. u_q8 (q and
// d set): u's Q8_0 form is written there too where a block's columns are whole blocks of 32 (*u_q8_written).
bool run_cluster(cudaStream_t s, const HyperReadArgs& a, const float* X, int T, float* u, float* inj, PendingInject pi,
                 float* X_out, ActQ8 u_q8, bool* u_q8_written) {
    const int want = cluster_request();
    if (!want || T < 1 || T > kWindowTokens || a.f32_act || !a.norm || !a.down || !a.up) return false;
    if (inj && !a.inject) return false;
    const int blk = hr_act_block(a.down_type, false), blk_up = hr_act_block(a.up_type, false);
    if (blk <= 0 || blk_up != 32 || is_plain(a.down_type) || is_plain(a.up_type) || a.r % 32 != 0) return false;
    if (a.inject && (a.inject_type != a.down_type || a.inject_rb != a.down_rb)) return false;
    const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    if (!aligned(a.down) || !aligned(a.up) || (a.inject && !aligned(a.inject)) ||
        !aligned(X) || !aligned(a.norm) || a.norm_len % 4 || a.H % 4 || (pi.y && !aligned(pi.y)))
        return false;
    const int R = a.r + (a.inject ? a.n : 0), stage = stage_request();
    bool launched = false;
    with_hr_format(a.down_type, [&](auto fd) {
        using FD = decltype(fd);
        if constexpr (FD::ABLK > 0) {
            with_hr_format(a.up_type, [&](auto fu) {
                using FU = decltype(fu);
                if constexpr (FU::ABLK == 32) {
                    const void* kernel = reinterpret_cast<const void*>(hr_cluster_kernel<FD, FU>);
                    // the largest cluster the device places, staging as many of the block's rows as fit
                    for (int C : {16, 8})
                    for (int staged : {3, 1, 0}) {   // bit 1: down rows, bit 2: up rows
                        if (launched || (want != 1 && want != C) || (stage >= 0 && stage != staged)) continue;
                        const ClusterLayout L = cluster_layout(C, a.n, a.H, a.r, R, blk, blk_up, a.down_rb, a.up_rb,
                                                               staged & 1, staged & 2);
                        if (!L.total || !cluster_fits(kernel, C, L.total)) continue;
                        cudaLaunchAttribute attr;
                        const cudaLaunchConfig_t cfg = cluster_config(C, T, L.total, s, attr);
                        const bool q8 = u_q8.q && u_q8.d && L.cols_b % 32 == 0;
                        CUDA_CHECK(cudaLaunchKernelEx(&cfg, hr_cluster_kernel<FD, FU>, X, pi, X_out, a.norm,
                                                      a.norm_len, a.n, a.H, a.eps, a.down, a.inject, a.down_rb, a.r,
                                                      R, a.up, a.up_rb, L, u, inj, q8 ? u_q8.q : nullptr,
                                                      q8 ? u_q8.d : nullptr));
                        if (u_q8_written) *u_q8_written = q8;
                        launched = true;
                    }
                }
            });
        }
    });
    if (launched) {
        g_cluster.fetch_add(1, std::memory_order_relaxed);
        g_fused.fetch_add(1, std::memory_order_relaxed);
    }
    return launched;
}
