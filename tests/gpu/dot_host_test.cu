// Runs on the host, no GPU needed: the integer chunk dots of the CUDA matmul (kernels/quant_dots.cuh, compiled for
// the host with dp4a / byte_perm emulated) against the CPU's scalar vec_dot on the same Q8 activations, every
// block format, 1 and 3 activation rows at once. Float sums differ only in order: max error ≤ 1e-6 of the largest dot.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

// The dots are __host__ __device__ and call this file's host lambdas: fine on the host, where they run.
#pragma nv_diag_suppress 20011, 20013, 20014
#include "backend/cuda/kernels/matmul_mmq.cuh"
#include "backend/cuda/kernels/quant_dots.cuh"
#include "quant/quant_internal.h"
#include "random_blocks.h"

using namespace strata;

namespace {

// The GPU activation layout: int8 values [n] and one float scale per ABLK values, from the CPU's act buffer.
void gpu_layout(GgmlType t, int ablk, const std::vector<uint8_t>& act, int n, int8_t* q, float* d) {
    if (ablk == 32) {
        const auto* b = (const qk::BlockQ8_0*)act.data();
        for (int i = 0; i < n / 32; ++i) {
            std::memcpy(q + 32 * i, b[i].qs, 32);
            d[i] = cuda::half_to_float(b[i].d);
        }
    } else {
        const auto* b = (const qk::BlockQ8_K*)act.data();
        for (int i = 0; i < n / 256; ++i) {
            std::memcpy(q + 256 * i, b[i].qs, 256);
            d[i] = b[i].d;
        }
    }
    (void)t;
}

template <class F>
int check_format(GgmlType t, std::mt19937& rng) {
    constexpr int NT = 3;
    const int n = 1024, rows = 32;
    const std::vector<uint8_t> data = gputest::random_rows(t, rows, n, rng);
    const size_t row_bytes = ggml_row_bytes(t, n);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<int8_t> q((size_t)NT * n);
    std::vector<float> d((size_t)NT * (n / F::ABLK));
    std::vector<std::vector<uint8_t>> act(NT, std::vector<uint8_t>(act_bytes(t, n)));
    for (int p = 0; p < NT; ++p) {
        std::vector<float> x(n);
        for (float& v : x) v = normal(rng);
        quantize_act(t, x.data(), act[p].data(), n);
        gpu_layout(t, F::ABLK, act[p], n, q.data() + (size_t)p * n, d.data() + (size_t)p * (n / F::ABLK));
    }
    double max_diff = 0, max_want = 0;
    bool same_single = true;
    for (int r = 0; r < rows; ++r) {
        const uint8_t* row = data.data() + r * row_bytes;
        float acc[NT] = {}, acc1 = 0;
        for (int u = 0; u < n / 32; ++u) {
            const auto act = [&](int p, int (&a)[8]) -> float {
                std::memcpy(a, q.data() + (size_t)p * n + 32 * u, 32);
                return d[(size_t)p * (n / F::ABLK) + 32 * u / F::ABLK];
            };
            const uint8_t* blk = row + (size_t)(u / (F::QK / 32)) * F::BYTES;
            cuda::QDot<F>::template dot<NT>(blk, u % (F::QK / 32), cuda::QDot<F>::global_grid(), act, NT, acc);
            // The single-row instantiation must give the same as row 0 of the multi-row one.
            float one[1] = {acc1};
            cuda::QDot<F>::template dot<1>(blk, u % (F::QK / 32), cuda::QDot<F>::global_grid(), act, 1, one);
            acc1 = one[0];
        }
        for (int p = 0; p < NT; ++p) {
            const float want = vec_dot_isa(Isa::scalar, t, n, row, act[p].data());
            max_diff = std::max(max_diff, std::fabs((double)acc[p] - want));
            max_want = std::max(max_want, (double)std::fabs(want));
        }
        same_single = same_single && acc1 == acc[0];
    }
    const double worst = same_single ? max_diff / std::max(max_want, 1e-30) : INFINITY;
    const bool ok = worst <= 1e-6;   // max |gpu − cpu| / max |cpu|: float sums in another order
    std::printf("%-8s worst rel %.2e  %s\n", ggml_type_name(t), worst, ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

// Formats with decode_perm (kActPerm): each chunk's term from decode_perm against activations in permute_act16's
// order with Σa given (chunk_term_sum) is the same float as chunk_term after decode.
template <class F>
int check_perm(GgmlType t, std::mt19937& rng) {
    using Q = cuda::QInt<F>;
    static_assert(Q::kActPerm, "a format with decode_perm");
    const int n = 1024, rows = 16;
    const std::vector<uint8_t> data = gputest::random_rows(t, rows, n, rng);
    const size_t row_bytes = ggml_row_bytes(t, n);
    std::uniform_int_distribution<int> byte(-127, 127);
    int bad = 0;
    for (int r = 0; r < rows; ++r)
        for (int u = 0; u < n / 32; ++u) {
            int8_t q[32];
            for (int8_t& v : q) v = (int8_t)byte(rng);
            int a[8], ap[8], asum = 0;
            std::memcpy(a, q, 32);
            std::memcpy(ap, q, 32);
            for (int v : q) asum += v;
            for (int h = 0; h < 2; ++h) {
                uint32_t g[4];
                std::memcpy(g, ap + 4 * h, 16);
                cuda::permute_act16(g);
                std::memcpy(ap + 4 * h, g, 16);
            }
            const uint8_t* blk = data.data() + r * row_bytes + (size_t)(u / (F::QK / 32)) * F::BYTES;
            cuda::IChunk c, cp;
            Q::decode(blk, u % (F::QK / 32), nullptr, c);
            Q::decode_perm(blk, u % (F::QK / 32), nullptr, cp);
            const float want = cuda::chunk_term<Q>(c, a, 0.37f), got = cuda::chunk_term_sum<Q>(cp, ap, 0.37f, asum);
            bad += want != got;
        }
    std::printf("%-8s decode_perm: %d of %d chunk terms differ  %s\n", ggml_type_name(t), bad, rows * n / 32,
                bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}

// The tensor-core prompt kernel's tile (kernels/matmul_mmq.cuh) on the host: 64 weight rows × 16 tokens staged by its
// helpers, each warp's mma emulated by rebuilding A and B from the lanes' fragments with the PTX layouts (written out
// here, apart from the helpers) and handing each lane its C elements, the terms added as the kernel adds them;
// against the CPU's scalar vec_dot.
template <class F, bool SUPER = false>
int check_mmq(GgmlType t, std::mt19937& rng) {
    namespace mmq = cuda::mmq;
    using Q = cuda::QInt<F>;
    static_assert(!SUPER || mmq::kSuperInt<F>);
    constexpr int TT = 16, NJ = TT / 8, kWarps = mmq::kRows / 16;
    const int n = 512, rows = mmq::kRows, nd = n / F::ABLK;
    const std::vector<uint8_t> data = gputest::random_rows(t, rows, n, rng);
    const size_t row_bytes = ggml_row_bytes(t, n);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<int8_t> q((size_t)TT * n);
    std::vector<float> d((size_t)TT * nd);
    std::vector<std::vector<uint8_t>> act(TT, std::vector<uint8_t>(act_bytes(t, n)));
    for (int p = 0; p < TT; ++p) {
        std::vector<float> x(n);
        for (float& v : x) v = normal(rng);
        quantize_act(t, x.data(), act[p].data(), n);
        gpu_layout(t, F::ABLK, act[p], n, q.data() + (size_t)p * n, d.data() + (size_t)p * nd);
    }
    std::vector<uint8_t> ws(mmq::kRows * mmq::kStride), xs(TT * mmq::kStride);
    mmq::RowScale wsc[mmq::kChunks][mmq::kRows];
    mmq::TokInfo xinfo[mmq::kChunks][TT];
    std::vector<float> acc((size_t)kWarps * 32 * NJ * 4, 0.0f);   // [warp][lane][j][i]
    std::vector<int> isum(acc.size(), 0), imin(acc.size(), 0);    // SUPER: the super-block's integers
    auto ix = [&](int w, int lane, int j, int i) { return (((size_t)w * 32 + lane) * NJ + j) * 4 + i; };
    auto at = [&](int w, int lane, int j, int i) -> float& { return acc[ix(w, lane, j, i)]; };
    for (int k0 = 0; k0 < n; k0 += mmq::kStep) {
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < mmq::kChunks; ++c)
                mmq::stage_weight_chunk<F>(data.data() + r * row_bytes, k0 / 32 + c, Q::global_grid(),
                                           ws.data() + r * mmq::kStride + 32 * c, wsc[c][r]);
        for (int tok = 0; tok < TT; ++tok)
            for (int c = 0; c < mmq::kChunks; ++c) {
                const int k = k0 + 32 * c;
                mmq::stage_act_chunk<Q::kActPerm>(q.data() + (size_t)tok * n + k, d[(size_t)tok * nd + k / F::ABLK],
                                     xs.data() + tok * mmq::kStride + 32 * c, xinfo[c][tok]);
            }
        for (int w = 0; w < kWarps; ++w)
            for (int c = 0; c < mmq::kChunks; ++c)
                for (int j = 0; j < NJ; ++j) {
                    int8_t A[16][32], B[32][8];
                    for (int lane = 0; lane < 32; ++lane) {
                        uint32_t a[4], b[2];
                        mmq::load_a(ws.data(), 16 * w, c, lane, a);
                        mmq::load_b(xs.data(), 8 * j, c, lane, b);
                        const int g = lane / 4, tq = lane % 4;
                        for (int e = 0; e < 4; ++e) {
                            for (int r = 0; r < 4; ++r) A[g + 8 * (r & 1)][4 * tq + 16 * (r >> 1) + e] = (int8_t)(a[r] >> (8 * e));
                            for (int r = 0; r < 2; ++r) B[4 * tq + 16 * r + e][g] = (int8_t)(b[r] >> (8 * e));
                        }
                    }
                    for (int lane = 0; lane < 32; ++lane)
                        for (int i = 0; i < 4; ++i) {
                            const int row = lane / 4 + 8 * (i / 2), col = 2 * (lane % 4) + (i % 2);
                            int lo = 0, hi = 0;
                            for (int k = 0; k < 32; ++k) {
                                const int v = (int)A[row][k] * (int)B[k][col];
                                if (Q::kSplit && k >= 16) hi += v;
                                else lo += v;
                            }
                            const mmq::RowScale& rs = wsc[c][16 * w + mmq::c_row(lane, i)];
                            const mmq::TokInfo& xi = xinfo[c][8 * j + mmq::c_col(lane, i)];
                            if constexpr (SUPER) {   // as the kernel: integers over the super-block, then one float
                                const size_t k = ix(w, lane, j, i);
                                mmq::add_chunk_ints<Q>(lo, hi, rs, xi, isum[k], imin[k]);
                                if ((k0 / 32 + c) % 8 == 7) {
                                    acc[k] += mmq::super_term<Q>(isum[k], imin[k], rs, xi);
                                    isum[k] = imin[k] = 0;
                                }
                            } else {
                                at(w, lane, j, i) += mmq::term<Q>(lo, hi, rs, xi);
                            }
                        }
                }
    }
    double max_diff = 0, max_want = 0;
    for (int w = 0; w < kWarps; ++w)
        for (int lane = 0; lane < 32; ++lane)
            for (int j = 0; j < NJ; ++j)
                for (int i = 0; i < 4; ++i) {
                    const int row = 16 * w + mmq::c_row(lane, i), tok = 8 * j + mmq::c_col(lane, i);
                    const float want = vec_dot_isa(Isa::scalar, t, n, data.data() + row * row_bytes, act[tok].data());
                    max_diff = std::max(max_diff, std::fabs((double)at(w, lane, j, i) - want));
                    max_want = std::max(max_want, (double)std::fabs(want));
                }
    const double worst = max_diff / std::max(max_want, 1e-30);
    const bool ok = worst <= 1e-6;
    std::printf("%-8s mmq tile%s: worst rel %.2e  %s\n", ggml_type_name(t), SUPER ? " (super-block sums)" : "", worst,
                ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

}  // namespace

int main() {
    using namespace strata::cuda;
    std::mt19937 rng(11);
    int failed = 0;
    failed += check_format<FmtQ8_0>(GgmlType::Q8_0, rng);
    failed += check_format<FmtQ4_0>(GgmlType::Q4_0, rng);
    failed += check_format<FmtQ5_0>(GgmlType::Q5_0, rng);
    failed += check_format<FmtQ4_1>(GgmlType::Q4_1, rng);
    failed += check_format<FmtQ5_1>(GgmlType::Q5_1, rng);
    failed += check_format<FmtIQ4_NL>(GgmlType::IQ4_NL, rng);
    failed += check_format<FmtQ2_0>(GgmlType::Q2_0, rng);
    failed += check_format<FmtQ2_K>(GgmlType::Q2_K, rng);
    failed += check_format<FmtQ3_K>(GgmlType::Q3_K, rng);
    failed += check_format<FmtQ4_K>(GgmlType::Q4_K, rng);
    failed += check_format<FmtQ5_K>(GgmlType::Q5_K, rng);
    failed += check_format<FmtQ6_K>(GgmlType::Q6_K, rng);
    failed += check_format<FmtIQ4_XS>(GgmlType::IQ4_XS, rng);
    failed += check_format<FmtIQ2_XXS>(GgmlType::IQ2_XXS, rng);
    failed += check_format<FmtIQ2_XS>(GgmlType::IQ2_XS, rng);
    failed += check_format<FmtIQ2_S>(GgmlType::IQ2_S, rng);
    failed += check_format<FmtIQ3_XXS>(GgmlType::IQ3_XXS, rng);
    failed += check_format<FmtIQ3_S>(GgmlType::IQ3_S, rng);
    failed += check_perm<FmtQ2_0>(GgmlType::Q2_0, rng);
    failed += check_mmq<FmtQ8_0>(GgmlType::Q8_0, rng);
    failed += check_mmq<FmtQ4_0>(GgmlType::Q4_0, rng);
    failed += check_mmq<FmtQ4_1>(GgmlType::Q4_1, rng);
    failed += check_mmq<FmtIQ4_NL>(GgmlType::IQ4_NL, rng);
    failed += check_mmq<FmtQ2_0>(GgmlType::Q2_0, rng);
    failed += check_mmq<FmtQ2_K>(GgmlType::Q2_K, rng);
    failed += check_mmq<FmtQ3_K>(GgmlType::Q3_K, rng);
    failed += check_mmq<FmtQ4_K>(GgmlType::Q4_K, rng);
    failed += check_mmq<FmtQ5_K>(GgmlType::Q5_K, rng);
    failed += check_mmq<FmtQ6_K>(GgmlType::Q6_K, rng);
    failed += check_mmq<FmtIQ2_XS>(GgmlType::IQ2_XS, rng);
    failed += check_mmq<FmtIQ3_XXS>(GgmlType::IQ3_XXS, rng);
    failed += check_mmq<FmtIQ2_S>(GgmlType::IQ2_S, rng);
    failed += check_mmq<FmtQ2_K, true>(GgmlType::Q2_K, rng);
    failed += check_mmq<FmtQ3_K, true>(GgmlType::Q3_K, rng);
    failed += check_mmq<FmtQ4_K, true>(GgmlType::Q4_K, rng);
    failed += check_mmq<FmtQ5_K, true>(GgmlType::Q5_K, rng);
    failed += check_mmq<FmtQ6_K, true>(GgmlType::Q6_K, rng);
    failed += check_mmq<FmtIQ4_XS, true>(GgmlType::IQ4_XS, rng);
    failed += check_mmq<FmtIQ2_XXS, true>(GgmlType::IQ2_XXS, rng);
    failed += check_mmq<FmtIQ2_XS, true>(GgmlType::IQ2_XS, rng);
    failed += check_mmq<FmtIQ2_S, true>(GgmlType::IQ2_S, rng);
    failed += check_mmq<FmtIQ3_XXS, true>(GgmlType::IQ3_XXS, rng);
    failed += check_mmq<FmtIQ3_S, true>(GgmlType::IQ3_S, rng);
    std::printf("%s\n", failed ? "dot_host_test: FAILED" : "dot_host_test: all formats within rounding of the CPU");
    return failed ? 1 : 0;
}
