// The work split and shared-memory layout of the cluster hyper read (hyper_read_cluster.cuh): host code, also
// compiled by tests/gpu/hyper_cluster_layout_test.cu, which checks it on the published shapes without a GPU.
#pragma once
#include <cstddef>

namespace strata::cuda {

constexpr int kClusterMaxChunk = 4096;    // inputs a prologue chunk at most (one float4 a thread of 1,024)
constexpr int kClusterMaxStreams = 8;     // streams a chunk may hold (the hyper kernels' kMaxStreams)

// Shared-memory layout of one block (byte offsets, 16-byte aligned) and the work split of a cluster.
struct ClusterLayout {
    int C = 0;        // blocks a cluster (one token)
    int P = 0;        // blocks that normalise a chunk of the inputs
    int pc = 0;       // inputs a chunk
    int rows_a = 0;   // down / inject rows a block
    int cols_b = 0;   // columns a block in the up phase (n up rows each)
    bool stage_a = true, stage_b = true;   // the block's down / up rows copied into shared memory (else read from
                                           // global memory, asked into L2 at the start)
    size_t w_a = 0, w_b = 0, xq = 0, xd = 0, own_q = 0, own_d = 0, own_xn = 0, ss = 0, res = 0, aq = 0, ad = 0,
           val = 0, uo = 0, total = 0;
};

inline size_t align16(size_t b) { return (b + 15) & ~(size_t)15; }

// The split of n·H inputs, R down / inject rows and H up columns over C blocks; total = 0 when it does not fit.
// Every block copies whole down rows (down_rb a multiple of 16) and, for each stream, cols_b = H / C contiguous up
// rows (cols_b · up_rb and H · up_rb multiples of 16: Q2_0's 90-byte rows of r = 320 qualify in runs of 160).
inline ClusterLayout cluster_layout(int C, int n, int H, int r, int R, int blk, int blk_up, size_t down_rb,
                                    size_t up_rb, bool stage_a, bool stage_b) {
    ClusterLayout l;
    l.stage_a = stage_a;
    l.stage_b = stage_b;
    const int nH = n * H;
    if (H % C || down_rb % 16 || ((size_t)(H / C) * up_rb) % 16 || ((size_t)H * up_rb) % 16) return l;
    for (int p = C; p >= 1 && !l.P; --p) {
        if (nH % p) continue;
        const int pc = nH / p;
        const bool streams_ok = pc <= H ? H % pc == 0 : pc % H == 0 && pc / H <= kClusterMaxStreams;
        if (pc % blk == 0 && pc % 32 == 0 && pc % 16 == 0 && pc <= kClusterMaxChunk && streams_ok) {
            l.P = p;
            l.pc = pc;
        }
    }
    if (!l.P) return l;
    l.C = C;
    l.rows_a = (R + C - 1) / C;
    l.cols_b = H / C;
    size_t o = 0;
    auto take = [&](size_t bytes) {
        const size_t at = o;
        o = align16(o + bytes);
        return at;
    };
    l.w_a = take(stage_a ? (size_t)l.rows_a * down_rb : 0);
    l.w_b = take(stage_b ? (size_t)n * l.cols_b * up_rb : 0);
    l.xq = take((size_t)nH);
    l.xd = take((size_t)(nH / blk) * sizeof(float));
    l.own_q = take((size_t)l.pc);
    l.own_d = take((size_t)(l.pc / blk) * sizeof(float));
    l.own_xn = take((size_t)l.pc * sizeof(float));
    l.ss = take(kClusterMaxStreams * sizeof(float));
    l.res = take((size_t)l.rows_a * sizeof(float));
    l.aq = take((size_t)r);
    l.ad = take((size_t)(r / blk_up) * sizeof(float));
    l.val = take((size_t)l.cols_b * n * sizeof(float));
    l.uo = take((size_t)l.cols_b * sizeof(float));
    l.total = o;
    return l;
}

}  // namespace strata::cuda
