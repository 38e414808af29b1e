// Needs a GPU: the two-launch decode experts (cuda::moe_decode, cuda::shexp_decode) against the kernels they replace
// (quantize_act, matmul gate and up by id, swiglu, quantize_act of h, matmul down by id, moe_combine / the gated add)
// on the decode shape (H 2560, I 640; 16 experts, top-10 of T = 1 and 6, top-8 of T = 2) and a small one, for the
// expert formats of the published files; twice each and once quantizing x in the kernel (same bits required), and
// the refusals of moe_decode_supported; the routed experts also through matrix tables (MatmulArgs::mats), some null.
// Also the T = 1 matmuls (split-K for narrow outputs, the kernels for many rows) of every format against T = 2.
// usage: moe_decode_test [--t1]   (--t1: only the refusals and the T = 1 matmuls, for the T = 1 switches)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/kernels/moe_gate_up.h"
#include "random_blocks.h"
#include "gpu_test_util.h"

using namespace strata;

namespace {

using gputest::rel_err;
using gputest::to_device;
using gputest::to_host;

int failed = 0;

void report(const std::string& name, double rel, double tol, bool same_bits) {
    const bool ok = rel <= tol && same_bits;
    std::printf("%-58s rel %.3e (tol %.0e)%s  %s\n", name.c_str(), rel, tol, same_bits ? "" : " RUNS/PATHS DIFFER",
                ok ? "ok" : "FAIL");
    failed += !ok;
}

cuda::MatmulArgs args(GgmlType t, const uint8_t* w, int n, int rows, int E, const int32_t* ids, int act_div) {
    cuda::MatmulArgs m;
    m.type = t;
    m.w = w;
    m.row_bytes = ggml_row_bytes(t, n);
    m.rows = rows;
    m.n = n;
    m.mat_stride = E > 1 ? m.row_bytes * rows : 0;
    m.ids = ids;
    m.act_div = act_div;
    return m;
}

struct Case {
    GgmlType gate, down;
    int H, I, E, T, k;   // E = 1 with shared: the shared expert (one matrix each, k = 1)
    bool shared;
};

void check(const Case& c, std::mt19937& rng) {
    const int P = c.T * c.k;
    auto rows = [&](GgmlType t, int r, int n) { return to_device(gputest::random_rows(t, (int64_t)c.E * r, n, rng)); };
    uint8_t *wg = rows(c.gate, c.I, c.H), *wu = rows(c.gate, c.I, c.H), *wd = rows(c.down, c.H, c.I);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x((size_t)c.T * c.H), gvec(c.H), wts(P), y0((size_t)c.T * c.H);
    for (float& v : x) v = normal(rng);
    for (float& v : gvec) v = 0.05f * normal(rng);
    for (float& v : y0) v = normal(rng);
    std::vector<int32_t> ids;
    for (int t = 0; t < c.T; ++t) {
        std::vector<int32_t> perm(c.E);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        ids.insert(ids.end(), perm.begin(), perm.begin() + c.k);
    }
    for (int p = 0; p < P; ++p) wts[p] = 0.05f + 0.1f * (p % c.k);
    float *dx = to_device(x), *dg = to_device(gvec), *dw = to_device(wts);
    int32_t* dids = c.shared ? nullptr : to_device(ids);
    const int ba = cuda::act_block(c.gate), bh = cuda::act_block(c.down);
    cuda::ActQ8 ax{to_device(std::vector<int8_t>((size_t)c.T * c.H)), to_device(std::vector<float>((size_t)c.T * c.H / ba))};
    cuda::ActQ8 ah{to_device(std::vector<int8_t>((size_t)P * c.I)), to_device(std::vector<float>((size_t)P * c.I / bh))};
    float *g = to_device(std::vector<float>((size_t)P * c.I)), *u = to_device(std::vector<float>((size_t)P * c.I));
    float* down = to_device(std::vector<float>((size_t)P * c.H));
    const int act_div = c.shared ? 1 : c.k;
    const cuda::MatmulArgs mg = args(c.gate, wg, c.H, c.I, c.E, dids, act_div), mu = args(c.gate, wu, c.H, c.I, c.E, dids, act_div);
    const cuda::MatmulArgs md = args(c.down, wd, c.I, c.H, c.E, dids, 1);
    const std::string name = std::string(c.shared ? "shexp_decode " : "moe_decode ") + ggml_type_name(c.gate) + "/" +
                             ggml_type_name(c.down) + " H=" + std::to_string(c.H) + " I=" + std::to_string(c.I) +
                             " T=" + std::to_string(c.T) + " k=" + std::to_string(c.k);
    if (!cuda::moe_decode_supported(mg, mu, md, P)) {
        report(name + " (refused)", INFINITY, 0, true);
        return;
    }
    // The reference: the separate kernels.
    cudaStream_t s = 0;
    cuda::quantize_act(s, ba, dx, c.T, c.H, ax);
    cuda::matmul(s, mg, dx, ax, P, g);
    cuda::matmul(s, mu, dx, ax, P, u);
    cuda::swiglu(s, g, u, (size_t)P * c.I, g);
    cuda::quantize_act(s, bh, g, P, c.I, ah);
    cuda::matmul(s, md, g, ah, P, down);
    std::vector<float> want((size_t)c.T * c.H);
    if (c.shared) {
        const std::vector<float> sh = to_host(down, (size_t)P * c.H);
        for (int t = 0; t < c.T; ++t) {
            double d = 0;
            for (int i = 0; i < c.H; ++i) d += (double)x[(size_t)t * c.H + i] * gvec[i];
            const float sg = 1.0f / (1.0f + std::exp(-(float)d));
            for (int i = 0; i < c.H; ++i) want[(size_t)t * c.H + i] = y0[(size_t)t * c.H + i] + sg * sh[(size_t)t * c.H + i];
        }
    } else {
        float* dy = to_device(want);
        cuda::moe_combine(s, down, dw, c.T, c.k, c.H, dy);
        want = to_host(dy, want.size());
        cudaFree(dy);
    }
    const size_t bytes = cuda::moe_decode_scratch_bytes(P, c.I);
    void* scratch = nullptr;
    CUDA_CHECK(cudaMalloc(&scratch, bytes));
    std::vector<float> got[3];   // twice with x quantized first, once quantized in the kernel (act.q null)
    for (int run = 0; run < 3; ++run) {
        float* dy = to_device(c.shared ? y0 : std::vector<float>((size_t)c.T * c.H, NAN));
        cuda::quantize_act(s, ba, dx, c.T, c.H, ax);
        const cuda::ActQ8 act = run < 2 ? ax : cuda::ActQ8{};
        if (c.shared) cuda::shexp_decode(s, mg, mu, md, act, dx, dg, c.T, scratch, bytes, dy);
        else cuda::moe_decode(s, mg, mu, md, act, dx, dw, c.T, c.k, scratch, bytes, dy);
        got[run] = to_host(dy, want.size());
        cudaFree(dy);
    }
    if (!c.shared) {
        // Matrix tables (MatmulArgs::mats, the hybrid device join): with every pair's matrix the same bits as by id;
        // with every third pair null (the CPU's), the same bits as by id with those pairs' weights 0.
        for (int with_null = 0; with_null < 2; ++with_null) {
            std::vector<const uint8_t*> tg(P), tu(P), td(P);
            std::vector<float> w0 = wts;
            for (int p = 0; p < P; ++p) {
                const bool cpu = with_null && p % 3 == 1;
                tg[p] = cpu ? nullptr : wg + (size_t)ids[p] * mg.mat_stride;
                tu[p] = cpu ? nullptr : wu + (size_t)ids[p] * mu.mat_stride;
                td[p] = cpu ? nullptr : wd + (size_t)ids[p] * md.mat_stride;
                if (cpu) w0[p] = 0.0f;
            }
            const uint8_t** dt[3] = {to_device(tg), to_device(tu), to_device(td)};
            cuda::MatmulArgs tmg = mg, tmu = mu, tmd = md;
            for (cuda::MatmulArgs* m : {&tmg, &tmu, &tmd}) {
                m->ids = nullptr;
                m->w = nullptr;
            }
            tmg.mats = dt[0];
            tmu.mats = dt[1];
            tmd.mats = dt[2];
            float* dw0 = to_device(w0);
            float* dref = to_device(std::vector<float>((size_t)c.T * c.H, NAN));
            float* dtab = to_device(std::vector<float>((size_t)c.T * c.H, NAN));
            const bool ok = cuda::moe_decode_supported(tmg, tmu, tmd, P);
            if (ok) {
                cuda::moe_decode(s, mg, mu, md, ax, dx, dw0, c.T, c.k, scratch, bytes, dref);
                cuda::moe_decode(s, tmg, tmu, tmd, ax, dx, dw0, c.T, c.k, scratch, bytes, dtab);
            }
            const std::vector<float> ref = to_host(dref, want.size()), tab = to_host(dtab, want.size());
            report(name + (with_null ? " tables, 1/3 null" : " tables"), ok ? rel_err(tab, ref) : INFINITY, 0,
                   std::memcmp(ref.data(), tab.data(), want.size() * 4) == 0);
            for (void* p : {(void*)dt[0], (void*)dt[1], (void*)dt[2], (void*)dw0, (void*)dref, (void*)dtab}) cudaFree(p);
        }
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    // The gate/up sums run in another order, so h can land one Q8 step apart; with a 4-bit down matrix one such step
    // moved y by 2.07e-4 on the H200 (Q2_0/Q4_0 T = 1, tests/gpu/results/2026-11-30-round2), over the 2e-4 of
    // cuda_ops_test's CPU comparison (which these calls pass): 5e-4 here, between two GPU paths.
    const size_t nb = want.size() * 4;
    report(name, rel_err(got[0], want), 5e-4,
           std::memcmp(got[0].data(), got[1].data(), nb) == 0 && std::memcmp(got[0].data(), got[2].data(), nb) == 0);
    for (void* p : {(void*)wg, (void*)wu, (void*)wd, (void*)dx, (void*)dg, (void*)dw, (void*)dids, (void*)ax.q,
                    (void*)ax.d, (void*)ah.q, (void*)ah.d, (void*)g, (void*)u, (void*)down, scratch})
        cudaFree(p);
}

// What the decode path must refuse: a Q8_K down format, too many pairs, differing gate/up types, f16 weights.
void check_refusals() {
    const uint8_t* w = reinterpret_cast<const uint8_t*>(16);
    const int32_t* ids = reinterpret_cast<const int32_t*>(16);
    const cuda::MatmulArgs g = args(GgmlType::Q2_0, w, 2560, 640, 8, ids, 10);
    const cuda::MatmulArgs d = args(GgmlType::IQ4_NL, w, 640, 2560, 8, ids, 1);
    const cuda::MatmulArgs g768 = args(GgmlType::Q2_0, w, 2560, 768, 8, ids, 10);
    struct Refusal {
        const char* name;
        cuda::MatmulArgs g, u, d;
        int P;
    } cases[] = {{"Q4_K down (Q8_K activations)", g768, g768, args(GgmlType::Q4_K, w, 768, 2560, 8, ids, 1), 10},
                 {"65 pairs", g, g, d, 65},
                 {"gate Q2_0, up IQ2_XS", g, args(GgmlType::IQ2_XS, w, 2560, 640, 8, ids, 10), d, 10},
                 {"F16 gate/up", args(GgmlType::F16, w, 2560, 640, 8, ids, 10),
                  args(GgmlType::F16, w, 2560, 640, 8, ids, 10), d, 10}};
    for (const Refusal& r : cases) {
        const bool refused = !cuda::moe_decode_supported(r.g, r.u, r.d, r.P);
        std::printf("refuses %-40s %s\n", r.name, refused ? "ok" : "FAIL");
        failed += !refused;
    }
}

// T = 1 against the T = 2 kernels on the same row twice (the same chunk arithmetic summed in another order): split-K
// at 320 rows of 6144 (narrow outputs: matmul_q8_splitk_kernel / matmul_plain_splitk_kernel), and 8196 rows of 2560
// (over the split-K bound, the last group of 4 rows partial): the kernel for many rows that the switches pick
// (one row per warp by default, STRATA_CUDA_T1_ROWS=1, STRATA_CUDA_T1_STAGED=1).
void check_t1(std::mt19937& rng) {
    for (GgmlType t : gputest::all_formats())
        for (int n : {2560, 6144}) {
            const int rows = n == 2560 ? 8196 : 320;
            uint8_t* w = to_device(gputest::random_rows(t, rows, n, rng));
            std::normal_distribution<float> normal(0.0f, 1.0f);
            std::vector<float> x(n);
            for (float& v : x) v = normal(rng);
            std::vector<float> x2 = x;
            x2.insert(x2.end(), x.begin(), x.end());
            float *dx = to_device(x2), *y1 = to_device(std::vector<float>(rows)), *y2 = to_device(std::vector<float>(2 * rows));
            const int blk = cuda::act_block(t);
            cuda::ActQ8 act{to_device(std::vector<int8_t>(2 * n)), to_device(std::vector<float>(blk ? 2 * n / blk : 1))};
            const cuda::MatmulArgs m = args(t, w, n, rows, 1, nullptr, 1);
            if (blk) cuda::quantize_act(0, blk, dx, 2, n, act);
            std::vector<float> got[2];
            for (auto& out : got) {
                cuda::matmul(0, m, dx, blk ? act : cuda::ActQ8{}, 1, y1);
                out = to_host(y1, rows);
            }
            cuda::matmul(0, m, dx, blk ? act : cuda::ActQ8{}, 2, y2);
            const std::vector<float> want = to_host(y2, rows);   // row 0 of the T = 2 result
            report(std::string("matmul T=1 ") + ggml_type_name(t) + " n=" + std::to_string(n) + " rows=" +
                       std::to_string(rows), rel_err(got[0], want), 1e-5,
                   std::memcmp(got[0].data(), got[1].data(), rows * 4) == 0);
            for (void* p : {(void*)w, (void*)dx, (void*)y1, (void*)y2, (void*)act.q, (void*)act.d}) cudaFree(p);
        }
}

}  // namespace

int main(int argc, char** argv) {
    const bool t1_only = argc > 1 && std::strcmp(argv[1], "--t1") == 0;
    std::mt19937 rng(7);
    try {
        cuda::upload_iq_tables();
        check_refusals();
        check_t1(rng);
        if (t1_only) {
            std::printf("moe_decode_test --t1: %s\n", failed ? "FAILED" : "all ok");
            return failed ? 1 : 0;
        }
        for (GgmlType gate : {GgmlType::Q2_0, GgmlType::IQ2_XS, GgmlType::IQ3_XXS, GgmlType::Q2_K, GgmlType::Q4_K})
            for (GgmlType down : {GgmlType::Q2_0, GgmlType::IQ4_NL, GgmlType::Q4_0}) {
                check({gate, down, 2560, 640, 16, 1, 10, false}, rng);
                check({gate, down, 2560, 640, 1, 1, 1, true}, rng);
            }
        for (GgmlType gate : {GgmlType::Q2_0, GgmlType::IQ2_XS}) {
            check({gate, GgmlType::IQ4_NL, 2560, 640, 16, 2, 8, false}, rng);
            check({gate, GgmlType::IQ4_NL, 2560, 640, 16, 6, 10, false}, rng);  // 60 pairs: a verify window's
            check({gate, GgmlType::IQ4_NL, 512, 96, 6, 1, 3, false}, rng);      // a tiny model's shape
            for (int T : {2, 4, 8}) check({gate, GgmlType::IQ4_NL, 2560, 640, 1, T, 1, true}, rng);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "moe_decode_test: error: %s\n", e.what());
        return 2;
    }
    std::printf("moe_decode_test: %s\n", failed ? "FAILED" : "all ok");
    return failed ? 1 : 0;
}
