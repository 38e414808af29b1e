// Every Backend op on the CUDA backend against the CPU backend on random inputs: matmul and embed in all 21 weight
// formats (T = 1, 2, 3, 4, 5, 8, 19 and the tiled 32, 64, 100, 257; Q8 activations and the f32-activation mode), moe_experts and shared_expert (both modes), hyper_read, hyper_inject_read and gdn_block (both modes; the conv folded into the recurrence == not, bits; a replay from kept projections == a plain call, bits), fused activation quantization == unfused (bits; the MoE kernels' too), route_topk (exact ties too), norms, elementwise ops, conv, GDN, RoPE, attention (dense and sparse
// keep-lists), indexer scores, select_cells, the cache writes at device positions (scatter_rows, pool_key_blocks),
// QSA's heads in one launch and the output gate (qsa_heads, sigmoid_gate == the ops, bits) and attention_cells (dense device counts and sparse cell lists). Ids and positions live in each backend's memory. Prints one line per check and writes JSON when given a path. Needs a GPU.
// The matmul groups are in cuda_ops_matmul.h, the MoE groups (experts, tensor-core prompt kernels, shared expert,
// routing) in cuda_ops_moe.h, the hyper-connection groups in cuda_ops_hyper.h.
// usage: cuda_ops_test [results.json] [--only GROUP]   (GROUP: part of a test group's name, e.g. gdn_block)
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <initializer_list>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "cuda_ops_harness.h"
#include "cuda_ops_hyper.h"
#include "cuda_ops_matmul.h"
#include "cuda_ops_moe.h"

using namespace strata;
using namespace strata::opstest;

namespace {

// Backend::argmax_rows against the CPU's (common/argmax.h: the largest value, the lowest index among equal ones, NaN
// never chosen, all-NaN rows give 0): one long row (the multi-block kernel, run twice: it resets its own count) with
// the maximum repeated across blocks' slices, at the last index, NaN and ±inf present; several short rows.
void test_argmax_rows() {
    auto run = [&](const std::string& name, const std::vector<float>& x, int rows, int n) {
        std::vector<int32_t> want(rows);
        cpu->argmax_rows(x.data(), rows, n, want.data());
        Dev dx(x), dout((size_t)rows);
        for (int rep = 0; rep < 2; ++rep) {
            gpu->argmax_rows(dx, rows, n, reinterpret_cast<int32_t*>(dout.p));
            const std::vector<float> got_bits = dout.get();
            std::vector<float> got(rows), wantf(rows);
            for (int r = 0; r < rows; ++r) {
                int32_t id;
                std::memcpy(&id, &got_bits[r], 4);
                got[r] = (float)id;
                wantf[r] = (float)want[r];
            }
            report("argmax_rows " + name + (rep ? " again" : ""), got, wantf, 0.0);
        }
    };
    const int V = 248320;
    std::vector<float> x = randn(V);
    x[V - 1] = 9.0f;
    run("long row max at the end", x, 1, V);
    x[123456] = 9.0f;
    x[7] = 9.0f;   // ties in different slices: the lowest index wins
    x[5000] = NAN;
    x[6000] = INFINITY;
    x[6001] = INFINITY;
    x[200000] = -INFINITY;
    run("long row ties nan inf", x, 1, V);
    std::vector<float> nan_row(40000, NAN);
    run("long row all NaN", nan_row, 1, 40000);
    std::vector<float> ninf_row(40000, -INFINITY);
    run("long row all -inf", ninf_row, 1, 40000);
    std::vector<float> short_rows = randn(3 * 1000);
    short_rows[1000 + 17] = short_rows[1000 + 900] = 50.0f;
    run("three short rows", short_rows, 3, 1000);
}

// select_cells: the same key cells as the CPU (torch.topk's block choice, exact ties too) for queries within and
// beyond the budget; scores relu'd Gaussians (many exact zeros), on a 0.5 grid (ties everywhere), or all zero.
void test_select_cells() {
    struct Case {
        int P, T, cr, kb;
    };
    for (const Case c : {Case{40, 1, 4, 4}, Case{100, 5, 4, 8}, Case{3000, 1, 4, 512}, Case{2100, 8, 4, 512},
                         Case{60, 3, 2, 4}, Case{10, 2, 4, 4}}) {
        for (int kind = 0; kind < 3; ++kind) {
            const int stride = (c.P + c.T) / c.cr;
            std::vector<float> scores = randn((size_t)c.T * stride);
            for (float& v : scores) v = kind == 2 ? 0.0f : std::max(0.0f, kind == 1 ? std::round(v * 2) / 2 : v);
            std::vector<int32_t> off(c.T + 1, 0);
            for (int t = 0; t < c.T; ++t) {
                const int M = c.P + t + 1, nb = M / c.cr;
                off[t + 1] = off[t] + (nb > c.kb ? c.kb * c.cr + (M - nb * c.cr) : M);
            }
            std::vector<int32_t> want(off[c.T]), pos(c.T);
            for (int t = 0; t < c.T; ++t) pos[t] = c.P + t;
            cpu->select_cells(scores.data(), stride, c.T, pos.data(), c.cr, c.kb, off.data(), want.data());
            Dev ds(scores), doff(int_bits(off)), dpos(int_bits(pos)), dcells(want.size());
            gpu->select_cells(ds, stride, c.T, reinterpret_cast<const int32_t*>(dpos.p), c.cr, c.kb,
                              reinterpret_cast<const int32_t*>(doff.p), reinterpret_cast<int32_t*>(dcells.p));
            const std::vector<float> got_bits = dcells.get();
            std::vector<float> got(want.size()), want_f(want.size());
            for (size_t i = 0; i < want.size(); ++i) {
                int32_t v;
                std::memcpy(&v, &got_bits[i], 4);
                got[i] = (float)v;
                want_f[i] = (float)want[i];
            }
            report("select_cells P=" + std::to_string(c.P) + " T=" + std::to_string(c.T) + " kb=" + std::to_string(c.kb) +
                       (kind == 0 ? " relu" : kind == 1 ? " ties" : " zeros"),
                   got, want_f, 0.0);
        }
    }
}

// A GDN layer of random weights (conv taps, dt_bias, a < 0 and the norm weight too; conv kernel kGdnConv) and its
// shape. together: the four input projections uploaded on `gpu` as one (upload_together, as prepare_weights does),
// else each alone (make_weight uploads it); the out projection too unless out_upload is false (the caller uploads).
// norm_offset: added to the norm weight (1: near the identity).
constexpr int kGdnConv = 4;
struct RandomGdn {
    GdnWeights w;
    Backend::GdnShape shape;
    int cd = 0;   // 2·nk·d + nv·d: the conv channels
};
RandomGdn random_gdn(int H, int nk, int nv, int d, GgmlType qkv, GgmlType small, GgmlType out, bool together,
                     bool out_upload = true, float norm_offset = 0.0f) {
    RandomGdn g;
    const int kd = nk * d, vd = nv * d;
    g.cd = 2 * kd + vd;
    GdnWeights& w = g.w;
    w.qkv = make_weight(qkv, H, g.cd, 1, "attn_qkv", !together);
    w.gate = make_weight(small, H, vd, 1, "attn_gate", !together);
    w.beta = make_weight(small, H, nv, 1, "ssm_beta", !together);
    w.alpha = make_weight(small, H, nv, 1, "ssm_alpha", !together);
    if (together) gpu->upload_together({&w.qkv, &w.gate, &w.beta, &w.alpha});
    w.out = make_weight(out, vd, H, 1, "ssm_out", out_upload);
    w.conv1d = make_f32_vector(randn((size_t)g.cd * kGdnConv, 0.3f), "ssm_conv1d");
    w.dt_bias = make_f32_vector(randn(nv), "ssm_dt.bias");
    std::vector<float> a = randn(nv, 0.5f), norm = randn(d, 0.3f);
    for (float& v : a) v = -std::exp(v);
    for (float& v : norm) v += norm_offset;
    w.a = make_f32_vector(a, "ssm_a");
    w.norm = make_f32_vector(norm, "ssm_norm");
    g.shape.nk = nk;
    g.shape.nv = nv;
    g.shape.d = d;
    g.shape.conv_kernel = kGdnConv;
    g.shape.rms_eps = 1e-6f;
    return g;
}

// Backend::gdn_block: the CUDA path (four projections sharing one quantization, conv + silu + l2 norms in one kernel,
// recurrence + gates + gated RMSNorm in one) against the CPU composition of primitive ops, on random weights (conv
// taps, dt_bias, a, the norm weight too) and a random carried state; y, the conv history and the state S are compared.
// Shapes of a tiny model (d 16, 32) and of the full model (d 128); T = 1, 3, 8 and a prompt chunk of 40. With Q8
// activations each side quantizes its own o (a last-bit difference may move an int8 one step), hence the wider
// tolerance there. A backend made with STRATA_CUDA_FUSED_GDN=0 must take the primitive ops.
void test_gdn_block(const std::string& suffix = "", bool expect_fused = true) {
    // together: the four input projections uploaded with upload_together (one matmul per run of one format, as
    // prepare_weights does), else one by one (four matmuls).
    struct Case {
        int H, nk, nv, d;
        GgmlType qkv, small, out;
        bool together;
    };
    const std::vector<Case> cases = {
        {64, 2, 4, 16, GgmlType::Q8_0, GgmlType::F16, GgmlType::Q8_0, true},
        {256, 2, 6, 32, GgmlType::Q4_K, GgmlType::IQ2_XS, GgmlType::Q2_0, true},
        {256, 2, 6, 32, GgmlType::Q2_0, GgmlType::Q2_0, GgmlType::Q2_0, true},
        {2048, 16, 48, 128, GgmlType::Q4_K, GgmlType::IQ2_XS, GgmlType::IQ2_XS, false},
        {2048, 16, 48, 128, GgmlType::Q2_0, GgmlType::Q2_0, GgmlType::Q2_0, true},
    };
    const int K = kGdnConv;
    const double tol = mode.empty() ? 1e-2 : 1e-4;
    for (const Case& c : cases) {
        const RandomGdn g = random_gdn(c.H, c.nk, c.nv, c.d, c.qkv, c.small, c.out, c.together, true, 1.0f);
        const GdnWeights& w = g.w;
        const Backend::GdnShape& shape = g.shape;
        const int cd = g.cd;
        for (int T : {1, 3, 8, 40}) {
            const std::string name = std::string("gdn_block ") + ggml_type_name(c.qkv) + "/" + ggml_type_name(c.small) +
                                     " d=" + std::to_string(c.d) + (c.together ? " together" : "") + " T=" +
                                     std::to_string(T) + mode + suffix;
            const std::vector<std::vector<float>> inputs = {randn((size_t)T * c.H), randn((size_t)(K - 1) * cd),
                                                            randn((size_t)c.nv * c.d * c.d, 0.1f),
                                                            std::vector<float>((size_t)T * c.H)};
            const int64_t fused_before = CudaBackend::fused_gdn_blocks();
            compare(name, inputs, {3, 1, 2},
                    [&](Backend& b, auto& p) { b.gdn_block(w, shape, p[0], T, p[1], p[2], p[3]); }, tol);
            const int64_t fused = CudaBackend::fused_gdn_blocks() - fused_before;
            report(name + " path", {(float)fused}, {expect_fused ? 1.0f : 0.0f}, 0.0);
        }
    }
}

// The recurrence kernel's quantized o (STRATA_CUDA_GDN_QUANT, on by default) against quantize_act on the same o (a
// backend made with it off): y, S and the history must be the same bits. Q8_0 (Q2_0 out weight) at d 32 and 128;
// a Q8_K out weight (IQ2_XS) at d 128 must not take the in-kernel path (its Q8_K form was 1e-7 off: gdn_fused.cu);
// T = 1, 3, 8 and 40 (the tiled prompt matmul).
void test_gdn_quant_bits() {
    setenv("STRATA_CUDA_GDN_QUANT", "0", 1);
    CudaBackend plain(0);
    setenv("STRATA_CUDA_GDN_QUANT", "1", 1);
    struct Case {
        int H, nk, nv, d;
        GgmlType out;
        bool quantizes;
    };
    const Case cases[] = {{256, 2, 6, 32, GgmlType::Q2_0, true}, {2048, 16, 48, 128, GgmlType::Q2_0, true},
                          {2048, 16, 48, 128, GgmlType::IQ2_XS, false}, {64, 2, 4, 16, GgmlType::Q8_0, false}};
    const int K = 4;
    for (const Case& c : cases) {
        const int kd = c.nk * c.d, vd = c.nv * c.d, cd = 2 * kd + vd;
        GdnWeights w;
        w.qkv = make_weight(GgmlType::Q2_0, c.H, cd, 1, "attn_qkv", false);
        w.gate = make_weight(GgmlType::Q2_0, c.H, vd, 1, "attn_gate", false);
        w.beta = make_weight(GgmlType::Q2_0, c.H, c.nv, 1, "ssm_beta", false);
        w.alpha = make_weight(GgmlType::Q2_0, c.H, c.nv, 1, "ssm_alpha", false);
        w.out = make_weight(c.out, vd, c.H, 1, "ssm_out", false);
        std::vector<float> a = randn(c.nv, 0.5f);
        for (float& v : a) v = -std::exp(v);
        w.conv1d = make_f32_vector(randn((size_t)cd * K, 0.3f), "ssm_conv1d");
        w.dt_bias = make_f32_vector(randn(c.nv), "ssm_dt.bias");
        w.a = make_f32_vector(a, "ssm_a");
        w.norm = make_f32_vector(randn(c.d, 0.3f), "ssm_norm");
        for (CudaBackend* b : {gpu, &plain}) {
            b->upload_together({&w.qkv, &w.gate, &w.beta, &w.alpha});
            for (const Weight* v : {&w.out, &w.conv1d, &w.dt_bias, &w.a, &w.norm}) b->upload_weight(*v);
        }
        Backend::GdnShape shape;
        shape.nk = c.nk;
        shape.nv = c.nv;
        shape.d = c.d;
        shape.conv_kernel = K;
        shape.rms_eps = 1e-6f;
        for (int T : {1, 3, 8, 40}) {
            const std::string name = std::string("gdn_block quantized o ") + ggml_type_name(c.out) + " d=" +
                                     std::to_string(c.d) + " T=" + std::to_string(T);
            const std::vector<float> u = randn((size_t)T * c.H), hist = randn((size_t)(K - 1) * cd),
                                     S = randn((size_t)c.nv * c.d * c.d, 0.1f);
            std::vector<std::vector<float>> got[2];
            const int64_t quantized_before = CudaBackend::gdn_quantized_outputs();
            for (int i = 0; i < 2; ++i) {
                CudaBackend* b = i == 0 ? gpu : &plain;
                std::swap(gpu, b);     // Dev allocates on `gpu`
                {
                    Dev du(u), dh(hist), dS(S), dy((size_t)T * c.H);
                    gpu->gdn_block(w, shape, du, T, dh, dS, dy);
                    got[i] = {dy.get(), dS.get(), dh.get()};
                }
                std::swap(gpu, b);
            }
            for (int k = 0; k < 3; ++k)
                report(name + " [" + "ySh"[k] + "] bits", got[0][k], got[1][k], 0.0);
            report(name + " path", {(float)(CudaBackend::gdn_quantized_outputs() - quantized_before)},
                   {c.quantizes ? 1.0f : 0.0f}, 0.0);
        }
    }
}

// gdn_block with the conv folded into the recurrence kernel (sm_90, d = 128, the published 16 key / 48 value heads
// and 16 / 32) against the conv as its own kernel: y, S and the history the same bits; T = 1, 2, 5.
void test_gdn_conv_fold() {
    const int K = kGdnConv, H = 2048;
    for (const int nv : {48, 32}) {
        const int nk = 16, d = 128, vd = nv * d;
        const RandomGdn g = random_gdn(H, nk, nv, d, GgmlType::Q2_0, GgmlType::Q2_0, GgmlType::Q2_0, true);
        const GdnWeights& w = g.w;
        const Backend::GdnShape& shape = g.shape;
        const int cd = g.cd;
        for (int T : {1, 2, 5}) {
            const std::string name = "gdn_block conv folded nv=" + std::to_string(nv) + " T=" + std::to_string(T) + mode;
            const std::vector<float> u = randn((size_t)T * H), hist = randn((size_t)(K - 1) * cd),
                                     S = randn((size_t)vd * d, 0.1f);
            std::vector<std::vector<float>> got[2];
            int64_t folds[2];
            for (int i = 0; i < 2; ++i) {
                CudaBackend::set_gdn_conv_fold(i == 0 ? 1 : 0);
                const int64_t before = CudaBackend::gdn_conv_folds();
                Dev du(u), dh(hist), dS(S), dy((size_t)T * H);
                gpu->gdn_block(w, shape, du, T, dh, dS, dy);
                got[i] = {dy.get(), dS.get(), dh.get()};
                folds[i] = CudaBackend::gdn_conv_folds() - before;
            }
            CudaBackend::set_gdn_conv_fold(-1);
            for (int k = 0; k < 3; ++k) report_same_bits(name + " [" + "ySh"[k] + "] bits", got[0][k], got[1][k]);
            report(name + " path", {(float)folds[0], (float)folds[1]}, {1.0f, 0.0f}, 0.0);
        }
    }
}

// A verify pass's kept GDN projections (Backend::GdnProjections): a 4-token call that records them gives the bits of
// one that does not, and a replay of its first n ≤ 4 tokens from them (no u, no output) leaves the conv history and
// state of a plain n-token call, bit for bit (a window's rows get one-token bits, so the recorded rows are the n-token
// call's). The fused path and the primitive ops (STRATA_CUDA_FUSED_GDN=0: the CPU reference's composition).
void test_gdn_kept_projections() {
    setenv("STRATA_CUDA_FUSED_GDN", "0", 1);
    CudaBackend unfused(0);
    setenv("STRATA_CUDA_FUSED_GDN", "1", 1);
    CudaBackend* fused = gpu;
    struct Case {
        int H, nk, nv, d;
        GgmlType qkv, small;
    };
    const Case cases[] = {{64, 2, 4, 16, GgmlType::Q8_0, GgmlType::F16}, {2048, 16, 48, 128, GgmlType::Q2_0, GgmlType::Q2_0}};
    const int K = kGdnConv, kTokens = 4;
    for (CudaBackend* b : {fused, &unfused}) {
        gpu = b;   // Dev and random_gdn allocate and upload on `gpu`
        const std::string path = b == fused ? "" : " unfused";
        for (const Case& c : cases) {
            const int vd = c.nv * c.d;
            const RandomGdn g = random_gdn(c.H, c.nk, c.nv, c.d, c.qkv, c.small, c.qkv, true);
            const GdnWeights& w = g.w;
            const Backend::GdnShape& shape = g.shape;
            const int cd = g.cd;
            const std::string name = "gdn_block kept projections d=" + std::to_string(c.d) + path;
            const std::vector<float> u = randn((size_t)kTokens * c.H), hist = randn((size_t)(K - 1) * cd),
                                     S = randn((size_t)vd * c.d, 0.1f);
            Dev kept(Backend::gdn_projection_floats(shape, kTokens));
            std::vector<std::vector<float>> rec, plain;
            for (int keep = 1; keep >= 0; --keep) {
                Dev du(u), dh(hist), dS(S), dy((size_t)kTokens * c.H);
                gpu->gdn_block(w, shape, du, kTokens, dh, dS, dy,
                               keep ? GdnProjections{kept, kTokens, true} : GdnProjections{});
                (keep ? rec : plain) = {dy.get(), dS.get(), dh.get()};
            }
            for (int k = 0; k < 3; ++k)
                report_same_bits(name + " recording [" + "ySh"[k] + "] bits", rec[k], plain[k]);
            for (int n = 1; n <= kTokens; ++n) {
                Dev du(std::vector<float>(u.begin(), u.begin() + (size_t)n * c.H)), dh(hist), dS(S), dy((size_t)n * c.H);
                gpu->gdn_block(w, shape, du, n, dh, dS, dy);
                Dev rh(hist), rS(S);
                gpu->gdn_block(w, shape, nullptr, n, rh, rS, nullptr, GdnProjections{kept, kTokens, false});
                report_same_bits(name + " replay n=" + std::to_string(n) + " [S] bits", rS.get(), dS.get());
                report_same_bits(name + " replay n=" + std::to_string(n) + " [h] bits", rh.get(), dh.get());
            }
        }
    }
    gpu = fused;
}

void test_gdn_block_unfused() {
    setenv("STRATA_CUDA_FUSED_GDN", "0", 1);
    CudaBackend unfused(0);
    setenv("STRATA_CUDA_FUSED_GDN", "1", 1);
    CudaBackend* fused = gpu;
    gpu = &unfused;
    test_gdn_block(" unfused", false);
    gpu = fused;
}

void test_small_ops() {
    const int T = 6, H = 64, n = 4, nH = n * H;
    for (int width : {16, 20, 33})   // plain formats take any row length (hyper-connection ranks of 16)
        for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
            const Weight& w = make_weight(t, width, 40, 1, "narrow");
            compare(std::string("matmul narrow ") + ggml_type_name(t) + " n=" + std::to_string(width),
                    {randn(T * width), std::vector<float>(T * 40)}, {1},
                    [&](Backend& b, auto& p) { b.matmul(w, p[0], T, p[1]); }, 1e-5);
        }
    const Weight& wn = make_f32_vector(randn(nH, 0.3f), "norm_w");
    compare("rms_norm grouped, weight", {randn(T * nH), std::vector<float>(T * nH)}, {1},
            [&](Backend& b, auto& p) { b.rms_norm(p[0], &wn, T, nH, H, 1e-6f, p[1]); }, 1e-5);
    compare("rms_norm in place, no weight", {randn(T * nH)}, {0},
            [&](Backend& b, auto& p) { b.rms_norm(p[0], nullptr, T, nH, 32, 1e-6f, p[0]); }, 1e-5);
    const Weight& wh = make_f32_vector(randn(32, 0.3f), "head_norm_w");
    compare("rms_norm weight period 32", {randn(T * 256), std::vector<float>(T * 256)}, {1},
            [&](Backend& b, auto& p) { b.rms_norm(p[0], &wh, T, 256, 32, 1e-6f, p[1]); }, 1e-5);
    compare("l2_norm", {randn(T * 128)}, {0}, [&](Backend& b, auto& p) { b.l2_norm(p[0], T, 128, 16, 1e-6f, 0.25f, p[0]); }, 1e-5);
    for (Unary f : {Unary::silu, Unary::sigmoid, Unary::softplus, Unary::exp}) {
        std::vector<float> x = randn(1000, 4.0f);
        x[0] = 25.0f;   // softplus's linear branch
        compare("unary " + std::to_string((int)f), {x, std::vector<float>(1000)}, {1},
                [&](Backend& b, auto& p) { b.unary(f, p[0], 1000, 0.7f, p[1]); }, 1e-6);
    }
    compare("mul", {randn(777), randn(777), std::vector<float>(777)}, {2},
            [&](Backend& b, auto& p) { b.mul(p[0], p[1], 777, p[2]); }, 0.0);
    compare("add", {randn(777), randn(777)}, {0}, [&](Backend& b, auto& p) { b.add(p[0], p[1], 777); }, 0.0);
    compare("scale", {randn(777)}, {0}, [&](Backend& b, auto& p) { b.scale(p[0], 777, -1.5f); }, 0.0);
    const Weight& rv = make_f32_vector(randn(40), "row_v");
    compare("add_row", {randn(T * 40)}, {0}, [&](Backend& b, auto& p) { b.add_row(p[0], T, 40, rv); }, 0.0);
    compare("mul_row", {randn(T * 40)}, {0}, [&](Backend& b, auto& p) { b.mul_row(p[0], T, 40, rv); }, 0.0);
    compare("slice_cols", {randn(T * 50), std::vector<float>(T * 20)}, {1},
            [&](Backend& b, auto& p) { b.slice_cols(p[0], T, 50, 17, 20, p[1]); }, 0.0);
    compare("deinterleave", {randn(T * 3 * 24), std::vector<float>(T * 3 * 16), std::vector<float>(T * 3 * 8)}, {1, 2},
            [&](Backend& b, auto& p) { b.deinterleave(p[0], T, 3, 16, 8, p[1], p[2]); }, 0.0);
    compare("mean_rows", {randn(8 * 48), std::vector<float>(48)}, {1},
            [&](Backend& b, auto& p) { b.mean_rows(p[0], 8, 48, p[1]); }, 1e-6);
    compare("repeat_streams", {randn(T * H), std::vector<float>(T * nH)}, {1},
            [&](Backend& b, auto& p) { b.repeat_streams(p[0], T, n, H, p[1]); }, 0.0);
    compare("ple_gate", {randn(T * nH), randn(T * nH), randn(T * H), std::vector<float>(T * nH)}, {3},
            [&](Backend& b, auto& p) { b.ple_gate(p[0], p[1], p[2], T, n, H, p[3]); }, 1e-5);
    compare("hyper_mix", {randn(T * nH), randn(T * nH), std::vector<float>(T * H)}, {2},
            [&](Backend& b, auto& p) { b.hyper_mix(p[0], p[1], T, n, H, p[2]); }, 1e-6);
    compare("hyper_inject", {randn(T * nH), randn(T * n), randn(T * H)}, {0},
            [&](Backend& b, auto& p) { b.hyper_inject(p[0], p[1], p[2], T, n, H); }, 1e-6);
    // concat_cols against a host reference (the CPU backend may predate the op).
    {
        const std::vector<float> a = randn(T * 10), c = randn(T * 7);
        Dev da(a), dc(c), dy(T * 17);
        gpu->concat_cols(da, dc, T, 10, 7, dy);
        std::vector<float> want;
        for (int t = 0; t < T; ++t) {
            want.insert(want.end(), a.begin() + t * 10, a.begin() + t * 10 + 10);
            want.insert(want.end(), c.begin() + t * 7, c.begin() + t * 7 + 7);
        }
        report("concat_cols", dy.get(), want, 0.0);
    }
    compare("copy overlapping", {randn(100)}, {0}, [&](Backend& b, auto& p) { b.copy(p[0] + 10, p[0], 60); }, 0.0);
    compare("fill", {randn(100)}, {0}, [&](Backend& b, auto& p) { b.fill(p[0] + 3, 2.5f, 90); }, 0.0);
}

// QSA's heads in one launch (qsa_heads.cu) against the CPU's deinterleave, rms_norm and rope, and the same bits as
// the CUDA backend issuing those ops one by one (Backend::qsa_heads); the output gate likewise. The model's head sizes
// (queries and keys 256, indexer queries 128), partial and whole rotation, with and without the indexer.
void test_qsa_heads() {
    const int nh = 6, nkv = 2, hd = 256, ni = 4, di = 128;
    auto norm = [&](int n, const char* name) {
        std::vector<float> w = randn(n, 0.3f);
        for (float& v : w) v += 1.0f;
        return &make_f32_vector(w, name);
    };
    const Weight *qn = norm(hd, "q_norm"), *kn = norm(hd, "k_norm"), *in = norm(di, "idx_q_norm");
    for (int T : {1, 3, 40})
        for (int n_rot : {64, 128})
            for (bool indexer : {true, false}) {
                std::vector<int32_t> pos(T);
                for (int t = 0; t < T; ++t) pos[t] = 3 + 7 * t + (t % 2) * 1000;
                const std::string name = "qsa_heads T=" + std::to_string(T) + " rot=" + std::to_string(n_rot) +
                                         (indexer ? "" : " no indexer");
                // p: qg, q, gate, k, qi, pos
                const std::vector<std::vector<float>> in_v = {
                    randn((size_t)T * nh * 2 * hd), std::vector<float>((size_t)T * nh * hd),
                    std::vector<float>((size_t)T * nh * hd), randn((size_t)T * nkv * hd), randn((size_t)T * ni * di),
                    int_bits(pos)};
                auto op = [&](Backend& b, auto& p) {
                    b.qsa_heads(p[0], p[1], p[2], p[3], p[4], *qn, *kn, indexer ? in : nullptr, T, nh, nkv, hd, ni, di,
                                1e-6f, n_rot, 1e6f, as_ints(p[5]));
                };
                const int64_t before = CudaBackend::fused_qsa_heads();
                compare(name, in_v, {1, 2, 3, 4}, op, 1e-5);
                report(name + " one launch", {(float)(CudaBackend::fused_qsa_heads() - before)}, {1.0f}, 0.0);
                std::deque<Dev> fused, ops;
                for (const auto& v : in_v) fused.emplace_back(v), ops.emplace_back(v);
                gpu->qsa_heads(fused[0], fused[1], fused[2], fused[3], fused[4], *qn, *kn, indexer ? in : nullptr, T,
                               nh, nkv, hd, ni, di, 1e-6f, n_rot, 1e6f, as_ints(fused[5]));
                gpu->Backend::qsa_heads(ops[0], ops[1], ops[2], ops[3], ops[4], *qn, *kn, indexer ? in : nullptr, T,
                                        nh, nkv, hd, ni, di, 1e-6f, n_rot, 1e6f, as_ints(ops[5]));
                const char* outs[4] = {" q", " gate", " k", " qi"};
                for (int o = 1; o <= 4; ++o)
                    report_same_bits(name + " == the ops" + outs[o - 1], fused[o].get(), ops[o].get());
            }
    for (size_t n : {(size_t)1536, (size_t)40 * 1536 + 3}) {
        const std::vector<float> o = randn(n), g = randn(n, 3.0f);
        compare("sigmoid_gate n=" + std::to_string(n), {o, g}, {0},
                [&](Backend& b, auto& p) { b.sigmoid_gate(p[0], p[1], n); }, 1e-6);
        Dev fo(o), fg(g), uo(o), ug(g);
        gpu->sigmoid_gate(fo, fg, n);
        gpu->Backend::sigmoid_gate(uo, ug, n);
        report_same_bits("sigmoid_gate n=" + std::to_string(n) + " == unary, mul", fo.get(), uo.get());
    }
}

void test_conv_gdn_rope_attention() {
    for (int dil : {1, 3})
        for (int T : {1, 5}) {
            const int C = 48, K = 4, Hh = (K - 1) * dil;
            const Weight& w = make_f32_vector(randn(C * K), "conv_w");
            compare("causal_conv dil=" + std::to_string(dil) + " T=" + std::to_string(T),
                    {randn(T * C), randn(Hh * C), std::vector<float>(T * C)}, {1, 2},
                    [&](Backend& b, auto& p) { b.causal_conv(p[0], T, C, w, K, dil, p[1], p[2]); }, 1e-6);
        }
    for (int d : {16, 128})
        for (int T : {1, 7}) {
            const int nk = 2, nv = 6;
            std::vector<float> g = randn(T * nv, 0.3f);
            for (float& v : g) v = -std::fabs(v);
            std::vector<float> beta = randn(T * nv);
            for (float& v : beta) v = 1.0f / (1.0f + std::exp(-v));
            std::vector<float> q = randn(T * nk * d, 1.0f / std::sqrt((float)d)), k = randn(T * nk * d, 1.0f / std::sqrt((float)d));
            compare("gdn_recurrent d=" + std::to_string(d) + " T=" + std::to_string(T),
                    {q, k, randn(T * nv * d), g, beta, randn(nv * d * d, 0.1f), std::vector<float>(T * nv * d)}, {5, 6},
                    [&](Backend& b, auto& p) { b.gdn_recurrent(p[0], p[1], p[2], p[3], p[4], T, nk, nv, d, d, p[5], p[6]); },
                    1e-5);
        }
    {
        const int T = 5, nh = 3, hd = 64, n_rot = 16;
        const std::vector<int32_t> consecutive = {7, 8, 9, 10, 11}, scattered = {0, 40, 3, 1000, 5};
        for (const auto* pos : {&consecutive, &scattered})   // positions in each backend's memory (input 1)
            compare(std::string("rope ") + (pos == &consecutive ? "consecutive" : "scattered"),
                    {randn(T * nh * hd), int_bits(*pos)}, {0},
                    [&](Backend& b, auto& p) { b.rope(p[0], T, nh, hd, n_rot, 1e6f, as_ints(p[1])); }, 1e-5);
        // M-RoPE: rows t, h, w [3, T] (an image's grid and text), sections [3, 3, 2] over 8 frequencies.
        const std::vector<int32_t> pos3 = {7, 8, 9, 10, 11, 7, 7, 8, 8, 12, 7, 8, 7, 8, 1000};
        compare("rope_multi", {randn(T * nh * hd), int_bits(pos3)}, {0},
                [&](Backend& b, auto& p) { b.rope_multi(p[0], T, nh, hd, n_rot, 1e6f, as_ints(p[1]), 3, 2); }, 1e-5);
    }
    for (int hd : {32, 64, 256}) {
        const int T = 4, nh = 4, nkv = 2, P = 37;   // queries at positions P − T … P − 1
        std::vector<std::vector<int32_t>> dense(T), sparse(T);
        for (int t = 0; t < T; ++t) {
            const int pos = P - T + t;
            for (int c = 0; c <= pos; ++c) dense[t].push_back(c);
            for (int c = 0; c <= pos; ++c)
                if (c % 3 != 1 || c == pos) sparse[t].push_back(c);
        }
        for (const auto* keep : {&dense, &sparse})
            compare("attention hd=" + std::to_string(hd) + (keep == &dense ? " dense" : " sparse"),
                    {randn(T * nh * hd), randn(P * nkv * hd), randn(P * nkv * hd), std::vector<float>(T * nh * hd)}, {3},
                    [&](Backend& b, auto& p) { b.attention(p[0], p[1], p[2], T, nh, nkv, hd, *keep, p[3]); }, 1e-5);
    }
    // three queries at positions 199 … 201 with compress ratio 4: 50, 50 and 50 blocks (201 / 4) of a row of 64
    compare("indexer_scores", {randn(3 * 4 * 32), randn(64 * 32), std::vector<float>(3 * 64),
                               int_bits(std::vector<int32_t>{199, 200, 201})}, {2},
            [&](Backend& b, auto& p) {
                b.indexer_scores(p[0], p[1], 3, reinterpret_cast<const int32_t*>(p[3]), 4, 4, 32, 0.17f, p[2], 64);
            }, 1e-5);
    compare("indexer_scores rows of queries 7 … 70", {randn(64 * 2 * 32), randn(256 * 32), std::vector<float>(64 * 256),
                                                        int_bits([] { std::vector<int32_t> v(64);
                                                                      for (int t = 0; t < 64; ++t) v[t] = 7 + t;
                                                                      return v; }())}, {2},
            [&](Backend& b, auto& p) {
                b.indexer_scores(p[0], p[1], 64, reinterpret_cast<const int32_t*>(p[3]), 1, 2, 32, 0.5f, p[2], 256);
            }, 1e-5);
}

// The cache writes at device positions (decode passes replayed as one graph): scatter_rows exactly (float4 rows,
// odd widths, a destination that is not 16-byte aligned); pool_key_blocks against the CPU backend (tokens that
// complete a block, tokens that complete none: their rows must stay as they were) and against the three CUDA ops it
// fuses (mean_rows, rms_norm, rope), whose arithmetic it repeats: the same bits.
void test_kv_write() {
    const int P = 40;
    const std::vector<int32_t> pos1 = {17}, pos3 = {5, 6, 7}, pos8 = {39, 0, 12, 3, 25, 26, 8, 31};
    for (int width : {512, 37, 64})
        for (const auto* pos : {&pos1, &pos3, &pos8}) {
            const int T = (int)pos->size(), shift = width == 64 ? 1 : 0;   // width 64: dst + 1, no float4 stores
            compare("scatter_rows width=" + std::to_string(width) + (shift ? " unaligned" : "") + " T=" +
                        std::to_string(T),
                    {randn((size_t)P * width + shift), randn((size_t)T * width), int_bits(*pos)}, {0},
                    [&](Backend& b, auto& p) { b.scatter_rows(p[0] + shift, p[1], T, width, as_ints(p[2])); }, 0.0);
        }

    struct Shape {
        int cr, di, n_rot;
    };
    const int rows = 4096;   // raw key rows: positions 0 … 4095
    const float eps = 1e-6f, theta = 1e6f;
    for (const Shape sh : {Shape{4, 128, 64}, Shape{4, 256, 64}, Shape{8, 100, 32}, Shape{2, 30, 16}, Shape{4, 66, 66}}) {
        const int nb = rows / sh.cr;
        const Weight& wn = make_f32_vector(randn(sh.di, 0.3f), "pool_norm_w" + std::to_string(sh.di));
        const std::vector<float> kraw = randn((size_t)rows * sh.di), kblock = randn((size_t)nb * sh.di);
        const std::vector<std::vector<int32_t>> cases = {
            {4095}, {4094}, {61, 62, 63}, {100, 101, 102, 103, 104, 105, 106, 107}, {3, 4095, 17, 2047, 1000, 11, 4094, 7}};
        for (const auto& pos : cases) {
            const int T = (int)pos.size();
            std::string at = " T=" + std::to_string(T) + " pos=";
            for (int t = 0; t < std::min(T, 3); ++t) at += (t ? "," : "") + std::to_string(pos[t]);
            if (T > 3) at += ",…";
            const std::string name = "pool_key_blocks cr=" + std::to_string(sh.cr) + " di=" + std::to_string(sh.di) +
                                     " rot=" + std::to_string(sh.n_rot) + at;
            auto op = [&](Backend& b, auto& p) {
                b.pool_key_blocks(p[0], p[1], as_ints(p[2]), T, sh.cr, sh.di, wn, eps, sh.n_rot, theta);
            };
            compare(name, {kraw, kblock, int_bits(pos)}, {1}, op, 1e-5);

            // The same rows from the ops the model issued before (one block at a time, positions uploaded).
            Dev dk(kraw), fused(kblock), composed(kblock), dpos(int_bits(pos)), first(1);
            std::vector<float*> fp = {dk.p, fused.p, dpos.p};
            op(*gpu, fp);
            for (int t = 0; t < T; ++t) {
                if ((pos[t] + 1) % sh.cr != 0) continue;
                const int b = (pos[t] + 1) / sh.cr - 1;
                float* row = composed.p + (size_t)b * sh.di;
                gpu->mean_rows(dk.p + (size_t)b * sh.cr * sh.di, sh.cr, sh.di, row);
                gpu->rms_norm(row, &wn, 1, sh.di, sh.di, eps, row);
                const std::vector<float> at_pos = int_bits({b * sh.cr});
                gpu->to_device(first.p, at_pos.data(), 1);
                gpu->rope(row, 1, 1, sh.di, sh.n_rot, theta, as_ints(first.p));
            }
            report(name + " bits vs 3 ops", fused.get(), composed.get(), 0.0);
        }
    }
}

// attention_cells on the device: dense counts (cells null: query t sees key positions 0 … off[t+1] − off[t] − 1),
// T = 1, 3, 8 at contexts 1 … 4096, against the CPU's attention with the same dense keep-lists; max_cells the
// bound rounded up (as a caller replaying one graph over many positions passes it) or −1 (unknown). Then sparse
// device cell lists with the same two bounds. Outputs start as NaN: every one must be written.
void test_attention_cells() {
    const int nh = 16, nkv = 2, hd = 256;   // the model's shape
    auto run = [&](const std::string& name, int T, int n0, const std::vector<std::vector<int32_t>>& keep, bool dense) {
        const int keys = n0 + T;
        const std::vector<float> q = randn((size_t)T * nh * hd), K = randn((size_t)keys * nkv * hd),
                                 V = randn((size_t)keys * nkv * hd);
        std::vector<float> want((size_t)T * nh * hd);
        cpu->attention(q.data(), K.data(), V.data(), T, nh, nkv, hd, keep, want.data());
        std::vector<int32_t> flat(T + 1, 0);
        int most = 0;
        for (int t = 0; t < T; ++t) {
            flat[t + 1] = flat[t] + (int32_t)keep[t].size();
            most = std::max(most, (int)keep[t].size());
        }
        if (!dense)
            for (int t = 0; t < T; ++t) flat.insert(flat.end(), keep[t].begin(), keep[t].end());
        Dev dq(q), dK(K), dV(V), dflat(int_bits(flat)), dout(want.size());
        const int32_t* off = as_ints(dflat.p);
        const int32_t* cells = dense ? nullptr : off + T + 1;
        for (int max_cells : {(most + 255) / 256 * 256, -1}) {
            gpu->fill(dout, NAN, dout.n);
            gpu->attention_cells(dq, dK, dV, T, nh, nkv, hd, off, cells, max_cells, dout);
            report(name + " max_cells=" + std::to_string(max_cells), dout.get(), want, 1e-5);
        }
    };
    for (int T : {1, 3, 8})
        for (int n0 : {1, 2, 31, 100, 513, 1024, 2047, 4096}) {   // query t sees n0 + t keys
            std::vector<std::vector<int32_t>> keep(T);
            for (int t = 0; t < T; ++t) {
                keep[t].resize(n0 + t);
                std::iota(keep[t].begin(), keep[t].end(), 0);
            }
            run("attention_cells dense T=" + std::to_string(T) + " n0=" + std::to_string(n0), T, n0, keep, true);
        }
    for (int n0 : {100, 4096}) {
        const int T = 3;
        std::vector<std::vector<int32_t>> keep(T);
        for (int t = 0; t < T; ++t)
            for (int c = 0; c < n0 + t; ++c)
                if (c % 3 != 1 || c == n0 + t - 1) keep[t].push_back(c);
        run("attention_cells sparse T=3 n0=" + std::to_string(n0), T, n0, keep, false);
    }
}

// --kv f16 and q8 (Backend::set_kv_type): keys and values written by write_kv into fp16 or q8 caches (the cache bytes
// must equal the CPU's: both round to nearest even, q8 with IEEE divisions), then attention_cells over them, CUDA
// against CPU, T = 1 and 8. hd 256 with 2 kv heads (q8: 8 scale groups a row), and hd 48 with 3 (a row of 144
// values: a short last group).
void test_kv_formats(KvType kv) {
    cpu->set_kv_type(kv);
    gpu->set_kv_type(kv);
    for (auto [nh, nkv, hd] : {std::array<int, 3>{16, 2, 256}, std::array<int, 3>{6, 3, 48}})
        for (int T : {1, 8})
            for (int keys : {33, 2048}) {
                const int kvw = nkv * hd;
                const size_t cache = (size_t)keys * kv_row_floats(kv, kvw);
                const int n0 = keys - T;   // query t sees n0 + t + 1 keys: the pass writes the last T
                std::vector<int32_t> pos(keys), flat(T + 1, 0);
                for (int i = 0; i < keys; ++i) pos[i] = i;
                for (int t = 0; t < T; ++t) flat[t + 1] = flat[t] + n0 + t + 1;
                const std::string name = std::string("kv_") + kv_type_name(kv) + " hd=" + std::to_string(hd) +
                                         " T=" + std::to_string(T) + " keys=" + std::to_string(keys) + mode;
                // p: q, K rows, V rows, K cache, V cache, positions, offsets, output
                const std::vector<std::vector<float>> in = {
                    randn((size_t)T * nh * hd), randn((size_t)keys * kvw), randn((size_t)keys * kvw),
                    std::vector<float>(cache), std::vector<float>(cache), int_bits(pos), int_bits(flat),
                    std::vector<float>((size_t)T * nh * hd)};
                auto op = [&](Backend& b, std::vector<float*>& p) {
                    b.write_kv(p[3], p[1], keys, kvw, as_ints(p[5]));
                    b.write_kv(p[4], p[2], keys, kvw, as_ints(p[5]));
                    b.attention_cells(p[0], p[3], p[4], T, nh, nkv, hd, as_ints(p[6]), nullptr, -1, p[7]);
                };
                compare(name, in, {7}, op, 1e-5, {3, 4});   // the K and V caches bit for bit too
            }
    cpu->set_kv_type(KvType::f32);
    gpu->set_kv_type(KvType::f32);
}

}  // namespace

int main(int argc, char** argv) {
    const char* json_path = nullptr;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
        else json_path = argv[i];
    }
    std::string error;   // what stopped the groups early, if anything
    setenv("STRATA_CUDA_FUSED_QUANT", "1", 1);   // off by default; every matmul check runs the fused kernels
    // The groups check the f32 tiled prompt kernel; the tensor-core one (the default) has its own group, matmul_mmq,
    // and the tiny models' parity (tests/gpu/parity.py) runs it end to end.
    setenv("STRATA_CUDA_MMQ", "0", 1);
    try {
        {
            CpuBackend cpu_f32(0, false, true);
            CudaBackend gpu_f32(0, true);
            cpu = &cpu_f32;
            gpu = &gpu_f32;
            mode = " f32act";
            group("matmul", test_matmul_and_embed);
            group("matmul_q6k_rows", test_matmul_q6k_rows);
            group("moe", test_moe);
            group("shared_expert", test_shared_expert);
            group("hyper_read", test_hyper_read);
            group("hyper_inject_read", test_hyper_inject_read);
            group("gdn_block", [] { test_gdn_block(); });
        }
        CpuBackend cpu_backend(0);
        CudaBackend gpu_backend(0);
        cpu = &cpu_backend;
        gpu = &gpu_backend;
        mode = "";
        std::printf("device: %s\n", gpu->device_name().c_str());
        group("matmul", test_matmul_and_embed);
        group("matmul_q6k_rows", test_matmul_q6k_rows);
        group("argmax_rows", test_argmax_rows);
        group("matmul_many_rows", test_matmul_many_rows);
        group("matmul_mmq", test_matmul_mmq);
        group("moe", test_moe);
        group("shared_expert", test_shared_expert);
        group("route_topk", test_route_topk);
        group("moe_fq_bits", test_moe_fq_bits);
        group("moe_window_bits", test_moe_window_bits);
        group("small_ops", test_small_ops);
        group("hyper_read", test_hyper_read);
        group("hyper_inject_read", test_hyper_inject_read);
        group("hyper_window_bits", test_hyper_window_bits);
        group("gdn_block", [] { test_gdn_block(); });
        group("gdn_block_unfused", test_gdn_block_unfused);
        group("gdn_block_quant", test_gdn_quant_bits);
        group("gdn_conv_fold", test_gdn_conv_fold);
        group("gdn_kept_projections", test_gdn_kept_projections);
        group("conv_gdn_rope_attention", test_conv_gdn_rope_attention);
        group("qsa_heads", test_qsa_heads);
        group("act_reuse", test_act_reuse);
        group("fused_quant_bits", test_fused_quant_bits);
        group("matmul_window_bits", test_matmul_window_bits);
        group("select_cells", test_select_cells);
        group("kv_write", test_kv_write);
        group("attention_cells", test_attention_cells);
        group("kv_f16", [] { test_kv_formats(KvType::f16); });
        group("kv_q8", [] { test_kv_formats(KvType::q8); });
        unfused_gpu.reset();
        weights.clear();
    } catch (const std::exception& e) {
        // The checks so far still go to the JSON and the summary (a fault in a late group must not hide them).
        std::fprintf(stderr, "cuda_ops_test: error: %s\n", e.what());
        error = e.what();
    }
    int failed = 0;
    for (const Result& r : results) failed += r.rel > r.tol;
    if (json_path) {
        std::FILE* f = std::fopen(json_path, "w");
        if (f) {
            std::fprintf(f, "{\"checks\": [\n");
            for (size_t i = 0; i < results.size(); ++i)
                std::fprintf(f, "  {\"name\": \"%s\", \"rel\": %.6e, \"tol\": %.1e, \"ok\": %s}%s\n", results[i].name.c_str(),
                             results[i].rel, results[i].tol, results[i].rel <= results[i].tol ? "true" : "false",
                             i + 1 < results.size() ? "," : "");
            std::fprintf(f, "], \"failed\": %d, \"stopped_by_error\": %s}\n", failed, error.empty() ? "false" : "true");
            std::fclose(f);
        }
    }
    std::printf("cuda_ops_test: %zu checks, %d failed%s%s\n", results.size(), failed,
                error.empty() ? "" : "; stopped by an error: ", error.c_str());
    return !error.empty() ? 2 : failed ? 1 : 0;
}
