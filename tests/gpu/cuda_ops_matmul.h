// cuda_ops_test's matmul groups: every weight format at every activation-row tile against the CPU, the one-row
// kernels for many rows (the Q6_K head, the staged rows), fused activation quantization == quantize_act first (bits),
// and a matmul input's shared quantization. Included by cuda_ops_test.cpp only (after cuda_ops_harness.h).
#pragma once
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "cuda_ops_harness.h"

namespace strata::opstest {

// A second CUDA backend that quantizes matmul inputs with quantize_act first (STRATA_CUDA_FUSED_QUANT=0, the
// engine's default; main turns the fused kernels on for `gpu`), made at first use; main releases it before the
// weights. Weights must be uploaded to it.
inline std::unique_ptr<CudaBackend> unfused_gpu;
inline CudaBackend& unfused_backend() {
    if (!unfused_gpu) {
        setenv("STRATA_CUDA_FUSED_QUANT", "0", 1);
        unfused_gpu = std::make_unique<CudaBackend>(0);
        setenv("STRATA_CUDA_FUSED_QUANT", "1", 1);
    }
    return *unfused_gpu;
}

// op(dx, dy) on backend b with x uploaded and `out` zeroed outputs; returns them.
inline std::vector<float> run_on(CudaBackend& b, const std::vector<float>& x, size_t out,
                                 const std::function<void(float*, float*)>& op) {
    float* dx = b.alloc(x.size());
    float* dy = b.alloc(out);
    b.to_device(dx, x.data(), x.size());
    b.fill(dy, 0.0f, out);
    op(dx, dy);
    std::vector<float> y(out);
    b.to_host(y.data(), dy, out);
    b.release(dx);
    b.release(dy);
    return y;
}

inline void test_matmul_and_embed() {
    for (GgmlType t : gputest::all_formats()) {
        const int n = 512, rows = 97;
        const Weight& w = make_weight(t, n, rows, 1, "mm");
        // every activation-row tile of the kernels, and a partial one; T >= 32: the tiled prompt kernels
        // (matmul_tiled.cu), with partial token and row tiles
        for (int T : {1, 2, 3, 4, 5, 8, 19, 32, 64, 100, 257}) {
            const std::vector<float> x = randn((size_t)T * n);
            std::vector<float> want((size_t)T * rows);
            cpu->matmul(w, x.data(), T, want.data());
            Dev dx(x), dy((size_t)T * rows);
            gpu->matmul(w, dx, T, dy);
            report(std::string("matmul ") + ggml_type_name(t) + " T=" + std::to_string(T) + mode, dy.get(), want, 1e-5);
        }
        const std::vector<int32_t> ids = {3, 0, 96, 41, 3};
        std::vector<float> want(ids.size() * n);
        cpu->embed(w, ids.data(), (int)ids.size(), want.data());
        Dev dy(ids.size() * n), d_ids(int_bits(ids));   // ids in the GPU backend's memory
        gpu->embed(w, reinterpret_cast<const int32_t*>(d_ids.p), (int)ids.size(), dy);
        report(std::string("embed ") + ggml_type_name(t) + mode, dy.get(), want, 0.0);
    }
}

// The head's shape at one token: Q6_K, many rows (matmul_q6k_t1.cuh's kernel when the rows are a multiple of 4; the
// general kernel otherwise), against the CPU, and the path taken. Real width (2560) and a narrower one.
inline void test_matmul_q6k_rows() {
    for (int n : {2560, 512})
        for (int rows : {8192, 4100, 4102}) {
            const Weight& w = make_weight(GgmlType::Q6_K, n, rows, 1, "q6k_rows");
            const std::vector<float> x = randn((size_t)n);
            std::vector<float> want((size_t)rows);
            cpu->matmul(w, x.data(), 1, want.data());
            Dev dx(x), dy((size_t)rows);
            const int64_t before = CudaBackend::q6k_t1_matmuls();
            gpu->matmul(w, dx, 1, dy);
            const std::string name = "matmul Q6_K rows=" + std::to_string(rows) + " n=" + std::to_string(n) + mode;
            report(name, dy.get(), want, 1e-5);
            const bool staged = rows % 4 == 0 && mode.empty();   // f32 activations take the f32 kernels
            report(name + " path", {(float)(CudaBackend::q6k_t1_matmuls() - before)}, {staged ? 1.0f : 0.0f}, 0.0);
        }
}

// One-row matmuls of many rows (over 8,192: the GDN in_proj's 16,480) in every integer format, through a backend that
// quantizes x with quantize_act first (the engine's default; the fused-quantization kernels are checked elsewhere):
// matmul_q8_staged_kernel where rows · row bytes is a multiple of 16 (the path check), the Q6_K head kernel for Q6_K.
inline void test_matmul_many_rows() {
    CudaBackend& unfused = unfused_backend();
    auto run = [&](GgmlType t, int n, int rows) {
        const Weight& w = make_weight(t, n, rows, 1, "many_rows");
        unfused.upload_weight(w);
        const std::vector<float> x = randn((size_t)n);
        std::vector<float> want((size_t)rows);
        cpu->matmul(w, x.data(), 1, want.data());
        const int64_t staged_before = CudaBackend::t1_staged_matmuls();
        const std::vector<float> got =
            run_on(unfused, x, (size_t)rows, [&](float* dx, float* dy) { unfused.matmul(w, dx, 1, dy); });
        const std::string name = std::string("matmul many rows ") + ggml_type_name(t) + " n=" + std::to_string(n) +
                                 " rows=" + std::to_string(rows);
        report(name, got, want, 1e-5);
        const bool staged = t != GgmlType::Q6_K && ((size_t)rows * ggml_row_bytes(t, n)) % 16 == 0;
        report(name + " path", {(float)(CudaBackend::t1_staged_matmuls() - staged_before)}, {staged ? 1.0f : 0.0f},
               0.0);
    };
    for (GgmlType t : gputest::all_formats()) {
        if (t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16) continue;
        run(t, 512, 8200);
    }
    for (GgmlType t : {GgmlType::Q2_0, GgmlType::IQ2_XS, GgmlType::IQ3_XXS, GgmlType::Q4_K})
        run(t, 2560, 16480);   // the GDN in_proj
    // The split-K kernel (one row a block): 4-warp blocks at 512 rows, 2-warp ones at the GDN out projection's 2,560
    // (more rows than 4-warp blocks fit at once on an H200).
    for (GgmlType t : {GgmlType::Q2_0, GgmlType::IQ2_XS, GgmlType::Q4_K})
        for (const auto [n, rows] : {std::pair{2560, 512}, std::pair{6144, 2560}}) {
            const Weight& w = make_weight(t, n, rows, 1, "splitk");
            unfused.upload_weight(w);
            const std::vector<float> x = randn((size_t)n);
            std::vector<float> want((size_t)rows);
            cpu->matmul(w, x.data(), 1, want.data());
            report(std::string("matmul split-K ") + ggml_type_name(t) + " n=" + std::to_string(n) + " rows=" +
                       std::to_string(rows),
                   run_on(unfused, x, (size_t)rows, [&](float* dx, float* dy) { unfused.matmul(w, dx, 1, dy); }), want,
                   1e-5);
        }
}

// With STRATA_CUDA_FUSED_QUANT=1 (set in main) the decode matmuls (T <= 8, and expert pairs of <= 8 tokens) quantize
// their activations inside the kernel; a backend made with STRATA_CUDA_FUSED_QUANT=0 runs quantize_act first. Both must give the same bits, in
// every block format (dense T = 1..8 incl. the 4-rows kernels, n = 2048 near the shared-memory bound) and for
// moe_experts (one expert per pair, and grouped pairs).
inline void test_fused_quant_bits() {
    CudaBackend& unfused = unfused_backend();
    const auto run = run_on;
    auto check = [&](const std::string& name, const std::vector<float>& fused, const std::vector<float>& plain) {
        report_same_bits("fused quant == unfused " + name, fused, plain);
    };
    for (GgmlType t : gputest::all_formats()) {
        if (t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16) continue;
        for (int n : {512, 2048}) {
            const int rows = 67;
            const Weight& w = make_weight(t, n, rows, 1, "fq");
            unfused.upload_weight(w);
            for (int T : {1, 2, 3, 4, 5, 8}) {
                const std::vector<float> x = randn((size_t)T * n);
                const size_t out = (size_t)T * rows;
                check(std::string(ggml_type_name(t)) + " n=" + std::to_string(n) + " T=" + std::to_string(T),
                      run(*gpu, x, out, [&](float* dx, float* dy) { gpu->matmul(w, dx, T, dy); }),
                      run(unfused, x, out, [&](float* dx, float* dy) { unfused.matmul(w, dx, T, dy); }));
            }
        }
    }
    {   // the Q6_K head kernel (matmul_q6k_t1.cuh): quantizing x itself or reading quantize_act's
        const int n = 2560, rows = 4100;
        const Weight& w = make_weight(GgmlType::Q6_K, n, rows, 1, "fq_q6k_rows");
        unfused.upload_weight(w);
        const std::vector<float> x = randn(n);
        check("Q6_K rows=4100 n=2560 T=1",
              run(*gpu, x, rows, [&](float* dx, float* dy) { gpu->matmul(w, dx, 1, dy); }),
              run(unfused, x, rows, [&](float* dx, float* dy) { unfused.matmul(w, dx, 1, dy); }));
    }
    const int E = 8, k = 3, H = 256, I = 256;
    for (GgmlType t : {GgmlType::IQ2_XS, GgmlType::Q2_0, GgmlType::Q4_K}) {
        MoeWeights m;
        set_experts(m, t, GgmlType::Q4_K, H, I, E, "fq_");
        for (const Weight* w : {&m.gate_exps, &m.up_exps, &m.down_exps}) unfused.upload_weight(*w);
        for (int T : {1, 4, 8}) {   // P = 3, 12 and 24: the decode kernels (one pair a block column)
            std::vector<float> ids_bits((size_t)T * k), wts((size_t)T * k);
            for (int p = 0; p < T * k; ++p) {
                const int32_t id = (p * 5 + p / k) % E;
                std::memcpy(&ids_bits[p], &id, 4);
                wts[p] = 0.2f + 0.1f * (p % k);
            }
            auto moe = [&](CudaBackend& b) {
                float* d_ids = b.alloc(ids_bits.size());
                float* d_wts = b.alloc(wts.size());
                b.to_device(d_ids, ids_bits.data(), ids_bits.size());
                b.to_device(d_wts, wts.data(), wts.size());
                const std::vector<float> x = randn((size_t)T * H);
                std::vector<float> y = run(b, x, (size_t)T * H, [&](float* dx, float* dy) {
                    b.moe_experts(m, dx, T, k, reinterpret_cast<const int32_t*>(d_ids), d_wts, dy);
                });
                b.release(d_ids);
                b.release(d_wts);
                return y;
            };
            const std::mt19937 saved = rng;
            const std::vector<float> fused = moe(*gpu);
            rng = saved;   // the same x for both
            check(std::string("moe_experts ") + ggml_type_name(t) + " T=" + std::to_string(T), fused, moe(unfused));
        }
    }
}

// A verify window's matmul (T = 2 … 4 rows in one call) gives each row the bits of a one-row call where one row
// takes a split-K kernel (narrow outputs: the router, hc and out projections; the block formats with Q8
// activations, F32 and BF16), the Q6_K head kernel (Q6_K from 4,096 rows) or the staged kernel (over 8,192 rows:
// the GDN in_proj; block formats); also
// quantizing x in the kernel (the unfused backend quantizes first; the staged kernel reads quantize_act's values).
inline void test_matmul_window_bits() {
    CudaBackend& unfused = unfused_backend();
    for (GgmlType t : {GgmlType::Q2_0, GgmlType::IQ2_XS, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::F32,
                       GgmlType::BF16})
        for (const auto [n, rows] : {std::pair{2048, 512}, std::pair{4096, 2048}, std::pair{2048, 4100},
                                     std::pair{2048, 8448}}) {
            const bool plain = t == GgmlType::F32 || t == GgmlType::BF16;
            if (plain && rows > 8192) continue;   // (plain weights over the split-K bound: the rows kernel)
            const Weight& w = make_weight(t, n, rows, 1, "win");
            unfused.upload_weight(w);
            for (CudaBackend* b : {gpu, &unfused}) {
                if (rows > 8192 && b == gpu) continue;   // (in-kernel quantization does not take the staged kernel)
                const std::vector<float> x = randn((size_t)4 * n);
                for (int T : {2, 4}) {
                    const std::vector<float> xt(x.begin(), x.begin() + (size_t)T * n);
                    const std::vector<float> window =
                        run_on(*b, xt, (size_t)T * rows, [&](float* dx, float* dy) { b->matmul(w, dx, T, dy); });
                    std::vector<float> one;
                    for (int r = 0; r < T; ++r) {
                        const std::vector<float> xr(x.begin() + (size_t)r * n, x.begin() + (size_t)(r + 1) * n);
                        const std::vector<float> yr =
                            run_on(*b, xr, rows, [&](float* dx, float* dy) { b->matmul(w, dx, 1, dy); });
                        one.insert(one.end(), yr.begin(), yr.end());
                    }
                    report_same_bits(std::string("matmul T=") + std::to_string(T) + " == T=1 rows " +
                                         ggml_type_name(t) + " n=" + std::to_string(n) + " rows=" +
                                         std::to_string(rows) + (b == gpu ? "" : " unfused"),
                                     window, one);
                }
            }
        }
}

// Matmuls of one input in a row share its quantization on the GPU; another op, or a matmul writing into the input,
// must end that: x·W1, x·W2 (shared), x·W3 (shared), x scaled, x·W1 again, x overwritten by z·W3, x·W1 again.
// T = 3 runs the fused-quantization kernels (each matmul quantizes x itself), T = 19 the shared quantize launch.
inline void test_act_reuse() {
    const int n = 256;
    for (int T : {3, 19})
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q2_0}) {
        const Weight& w1 = make_weight(t, n, 64, 1, "reuse1");
        const Weight& w2 = make_weight(t, n, 64, 1, "reuse2");
        const Weight& w3 = make_weight(t, n, n, 1, "reuse3");
        const std::vector<float> zero64(T * 64), zero(T * n);
        compare(std::string("matmul input reuse ") + ggml_type_name(t) + " T=" + std::to_string(T) + mode,
                {randn(T * n), randn(T * n), zero64, zero64, zero, zero64, zero64}, {0, 2, 3, 4, 5, 6},
                [&](Backend& b, auto& p) {
                    b.matmul(w1, p[0], T, p[2]);
                    b.matmul(w2, p[0], T, p[3]);
                    b.matmul(w3, p[0], T, p[4]);
                    b.scale(p[0], (size_t)T * n, 0.5f);
                    b.matmul(w1, p[0], T, p[5]);
                    b.matmul(w3, p[1], T, p[0]);
                    b.matmul(w1, p[0], T, p[6]);
                }, 1e-5);
    }
}

}  // namespace strata::opstest
