// Runs on the host, no GPU needed: the cluster hyper read's work split and shared-memory layout
// (kernels/hyper_read_cluster_layout.h) on the published shape (H 2560, 4 streams, r 320) and the test shape (H 2048)
// in the format pairs the GGUFs use. Every input lies in exactly one chunk, chunks hold whole activation blocks and sit
// inside one stream (or hold whole streams), every down / inject row and up column has a block, the regions are
// 16-byte aligned, in order and apart, and a fully staged cluster of 16 fits the H100 / H200's 227 KB a block.
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cuda/kernels/hyper_read_cluster_layout.h"

using strata::cuda::ClusterLayout;
using strata::cuda::cluster_layout;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
    if (!ok) {
        std::printf("FAIL %s\n", what.c_str());
        ++failures;
    }
}

struct Shape {
    const char* name;
    int H, r, blk, blk_up;      // activation blocks of the down and up formats
    size_t down_bytes_per_256;  // bytes of 256 down weights
    size_t up_bytes_per_32;     // bytes of 32 up weights
};

void check_shape(const Shape& s) {
    const int n = 4, nH = n * s.H, R = s.r + n;
    const size_t down_rb = (size_t)nH / 256 * s.down_bytes_per_256, up_rb = (size_t)s.r / 32 * s.up_bytes_per_32;
    for (int C : {16, 8})
        for (int staged : {3, 1, 0}) {
            const ClusterLayout L =
                cluster_layout(C, n, s.H, s.r, R, s.blk, s.blk_up, down_rb, up_rb, staged & 1, staged & 2);
            const std::string at = std::string(s.name) + " C=" + std::to_string(C) + " staged=" + std::to_string(staged);
            check(L.total > 0, at + ": a layout");
            if (!L.total) continue;
            check(L.P >= 1 && L.P <= C && L.P * L.pc == nH, at + ": the chunks cover the inputs once");
            check(L.pc % s.blk == 0 && L.pc % 32 == 0 && L.pc <= strata::cuda::kClusterMaxChunk,
                  at + ": a chunk holds whole activation blocks");
            check(L.pc <= s.H ? s.H % L.pc == 0 : L.pc % s.H == 0, at + ": a chunk inside a stream or whole streams");
            check(L.rows_a * C >= R && (L.rows_a - 1) * C < R, at + ": every down / inject row has a block");
            check(L.cols_b * C == s.H && L.cols_b % 32 == 0, at + ": the up columns, whole Q8_0 blocks of u");
            check(down_rb % 16 == 0 && (L.cols_b * up_rb) % 16 == 0, at + ": 16-byte copies");
            const std::vector<size_t> starts = {L.w_a, L.w_b, L.xq, L.xd, L.own_q, L.own_d, L.own_xn,
                                                L.ss, L.res, L.aq, L.ad, L.val, L.uo, L.total};
            const std::vector<size_t> sizes = {
                staged & 1 ? (size_t)L.rows_a * down_rb : 0, staged & 2 ? (size_t)n * L.cols_b * up_rb : 0,
                (size_t)nH, (size_t)nH / s.blk * 4, (size_t)L.pc, (size_t)L.pc / s.blk * 4, (size_t)L.pc * 4,
                strata::cuda::kClusterMaxStreams * 4, (size_t)L.rows_a * 4, (size_t)s.r, (size_t)s.r / s.blk_up * 4,
                (size_t)L.cols_b * n * 4, (size_t)L.cols_b * 4};
            for (size_t i = 0; i + 1 < starts.size(); ++i) {
                check(starts[i] % 16 == 0, at + ": region " + std::to_string(i) + " 16-byte aligned");
                check(starts[i] + sizes[i] <= starts[i + 1], at + ": region " + std::to_string(i) + " apart");
            }
            if (C == 16 && staged == 3)
                check(L.total + 1056 <= 227 * 1024, at + ": fits a block's 227 KB (with the 1,056 static bytes)");
            std::printf("%-40s P=%2d pc=%4d rows=%2d cols=%3d shared %6.1f KB\n", at.c_str(), L.P, L.pc, L.rows_a,
                        L.cols_b, L.total / 1024.0);
        }
}

}  // namespace

int main() {
    // bytes a 256 down weights / 32 up weights: Q2_0 72 (18 a 64) / 9 (r 320 = 5 blocks of 64 = 90 bytes a row),
    // IQ2_XS 74 / IQ4_NL 18, Q2_K 84 / Q4_0 18, IQ3_XXS 98 / IQ4_NL 18
    const Shape shapes[] = {
        {"Q2_0/Q2_0 H=2560", 2560, 320, 32, 32, 72, 9},    {"IQ2_XS/IQ4_NL H=2560", 2560, 320, 256, 32, 74, 18},
        {"Q2_K/Q4_0 H=2560", 2560, 320, 256, 32, 84, 18},  {"IQ3_XXS/IQ4_NL H=2560", 2560, 320, 256, 32, 98, 18},
        {"Q2_0/Q2_0 H=2048", 2048, 320, 32, 32, 72, 9},    {"IQ2_XS/IQ4_NL H=2048", 2048, 320, 256, 32, 74, 18},
    };
    for (const Shape& s : shapes) check_shape(s);
    // A row length that 16-byte copies cannot take (IQ2_XS at 256 inputs: 74 bytes) gets no layout.
    check(cluster_layout(16, 4, 64, 64, 68, 256, 32, 74, 36, true, true).total == 0, "74-byte rows: no layout");
    std::printf("hyper_cluster_layout_test: %s (%d failed)\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
