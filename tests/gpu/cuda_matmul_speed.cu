// Speed of the CUDA matmul kernels (kernels/matmul.cu, called directly, activation quantization included):
//   big      one 4096-wide matrix of ~512 MB per format (far beyond L2) at T = 1, 2, 4, 8 -> weight GB/s
//   dense    the model's real dense shapes (GGUF.md: H 2560, qkv 10240, gate 6144, hc 10240 -> 320, head 248320)
//   experts  the expert-by-id path on a 512-expert tensor (gate 2560 -> 640, down 640 -> 2560), top-10 pairs for
//            T = 1 and T = 4 tokens (T = 4: the tokens share about half their experts), GB/s of the experts read
//   prompt   T = 256 and 1024 (prompt chunks): attn_qkv on one matrix, gate_exps and down_exps over 512 experts
//            top-10 (pairs sorted by expert on the device, sort timed too): the tiled kernels (matmul_tiled.cu), f32
//            and tensor-core (" mmq"), with TFLOP/s
//   decode   the decode pass's dense shapes (GDN in_proj as one matrix, ssm_out, hc_down, router F32, BF16) T = 1..8
//   moe      routed experts (top-10 of 512, T = 1) and the shared expert (T = 1..8) as whole calls, per format mix
// Each case runs back to back `iters` times between two events; small cases include the launch cost (as decode does).
// usage: cuda_matmul_speed [results.json] [--quick] [--prompt | --decode | --head]   (only the prompt / decode+moe
//        groups / the output head)
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/kernels/matmul_tiled.h"
#include "backend/cuda/kernels/moe_gate_up.h"
#include "backend/cuda/kernels/shared_expert.h"
#include "random_blocks.h"

using namespace strata;

namespace {

std::mt19937 rng(1);
std::string json;
int results = 0;

// Device copy of `rows` rows: a random block of up to 4096 rows repeated (random data of 0.5 GB would take long).
uint8_t* upload_rows(GgmlType t, int64_t rows, int n) {
    const size_t row_bytes = ggml_row_bytes(t, n);
    const int64_t block_rows = std::min<int64_t>(rows, 4096);
    const std::vector<uint8_t> block = gputest::random_rows(t, block_rows, n, rng);
    uint8_t* d = nullptr;
    CUDA_CHECK(cudaMalloc(&d, row_bytes * (size_t)rows));
    for (int64_t r = 0; r < rows; r += block_rows) {
        const int64_t k = std::min(block_rows, rows - r);
        CUDA_CHECK(cudaMemcpy(d + (size_t)r * row_bytes, block.data(), (size_t)k * row_bytes, cudaMemcpyHostToDevice));
    }
    return d;
}

struct Acts {
    float* x = nullptr;
    cuda::ActQ8 q;
};

Acts make_acts(int rows, int n) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> h((size_t)rows * n);
    for (float& v : h) v = normal(rng);
    Acts a;
    CUDA_CHECK(cudaMalloc(&a.x, h.size() * 4));
    CUDA_CHECK(cudaMalloc(&a.q.q, h.size()));
    CUDA_CHECK(cudaMalloc(&a.q.d, h.size() / 32 * 4));
    CUDA_CHECK(cudaMemcpy(a.x, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    return a;
}

void free_acts(Acts& a) {
    cudaFree(a.x);
    cudaFree(a.q.q);
    cudaFree(a.q.d);
}

// Times `call` run back to back `iters` times between two events; prints and records µs per call, GB/s of `bytes`.
template <class Call>
void time_fn(cudaStream_t s, const std::string& group, const std::string& name, GgmlType type, int n, int64_t rows,
             int act_rows, int P, size_t bytes, int iters, Call call) {
    for (int i = 0; i < 3; ++i) call();
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    CUDA_CHECK(cudaEventRecord(e0, s));
    for (int i = 0; i < iters; ++i) call();
    CUDA_CHECK(cudaEventRecord(e1, s));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    const double us = ms * 1e3 / iters, gbs = (double)bytes / (us * 1e-6) / 1e9;
    const double tflops = 2.0 * P * n * (double)rows / (us * 1e-6) / 1e12;
    std::printf("%-8s %-28s %-8s n=%-6d rows=%-7lld P=%-3d %9.2f us %8.1f GB/s %6.2f TFLOP/s\n", group.c_str(),
                name.c_str(), ggml_type_name(type), n, (long long)rows, P, us, gbs, tflops);
    char line[400];
    std::snprintf(line, sizeof line,
                  "%s  {\"group\": \"%s\", \"name\": \"%s\", \"type\": \"%s\", \"n\": %d, \"rows\": %lld, \"T\": %d, "
                  "\"P\": %d, \"bytes\": %zu, \"us\": %.2f, \"GBps\": %.1f, \"TFLOPs\": %.3f}",
                  results ? ",\n" : "", group.c_str(), name.c_str(), ggml_type_name(type), n, (long long)rows,
                  act_rows, P, bytes, us, gbs, tflops);
    json += line;
    ++results;
}

// Times quantize_act + matmul; act_rows activation rows, P output rows; bytes = weight bytes the call reads.
// experts_E > 0: the pairs are sorted by expert (m.ids, E experts) and run by the tiled expert kernels instead.
void time_case(cudaStream_t s, const std::string& group, const std::string& name, const cuda::MatmulArgs& m,
               Acts& a, int act_rows, int P, float* y, size_t bytes, int iters, int experts_E = 0,
               void* sort_scratch = nullptr) {
    const int blk = cuda::act_block(m.type);
    time_fn(s, group, name, m.type, m.n, m.rows, act_rows, P, bytes, iters, [&] {
        if (blk) cuda::quantize_act(s, blk, a.x, act_rows, m.n, a.q);
        if (experts_E) {
            const cuda::ExpertOrder o = cuda::sort_by_expert(s, m.ids, P, experts_E, sort_scratch);
            cuda::matmul_tiled_experts(s, m, o, a.x, blk ? a.q : cuda::ActQ8{}, P, y);
        } else {
            cuda::matmul(s, m, a.x, blk ? a.q : cuda::ActQ8{}, P, y);
        }
    });
}

// One expert tensor of a case: its matrices' shape; act_div k: every pair reads its token's row, 1: its own (down).
struct ExpertMatrix {
    const char* name;
    GgmlType type;
    int n, rows, act_div;
};

cuda::MatmulArgs dense_args(GgmlType t, const uint8_t* w, int n, int64_t rows) {
    cuda::MatmulArgs m;
    m.type = t;
    m.w = w;
    m.row_bytes = ggml_row_bytes(t, n);
    m.rows = rows;
    m.n = n;
    return m;
}

void bench_big(cudaStream_t s, bool quick) {
    const int n = 4096;
    const GgmlType types[] = {GgmlType::IQ2_XS, GgmlType::Q2_0, GgmlType::IQ3_XXS, GgmlType::IQ4_NL, GgmlType::Q4_K,
                              GgmlType::Q6_K,   GgmlType::Q8_0, GgmlType::BF16,    GgmlType::F16};
    Acts a = make_acts(8, n);
    for (GgmlType t : types) {
        const size_t row_bytes = ggml_row_bytes(t, n);
        const int64_t rows = (int64_t)((quick ? (size_t)128 << 20 : (size_t)512 << 20) / row_bytes) / 4096 * 4096;
        uint8_t* w = upload_rows(t, rows, n);
        float* y = nullptr;
        CUDA_CHECK(cudaMalloc(&y, (size_t)8 * rows * 4));
        for (int T : {1, 2, 4, 8})
            time_case(s, "big", "T=" + std::to_string(T), dense_args(t, w, n, rows), a, T, T, y, row_bytes * rows, 20);
        cudaFree(y);
        cudaFree(w);
    }
    free_acts(a);
}

// The output head (a and y as bench_dense makes them: 4 rows of 10240 activations, 4 x 248320 outputs).
void bench_head(cudaStream_t s, Acts& a, float* y) {
    for (GgmlType t : {GgmlType::Q6_K, GgmlType::Q5_K}) {
        uint8_t* w = upload_rows(t, 248320, 2560);
        for (int T : {1, 4})
            time_case(s, "dense", "output 2560->248320 T=" + std::to_string(T), dense_args(t, w, 2560, 248320), a, T,
                      T, y, ggml_row_bytes(t, 2560) * 248320, 20);
        cudaFree(w);
    }
}

void bench_dense(cudaStream_t s) {
    struct Shape {
        const char* name;
        int n;
        int64_t rows;
    };
    const Shape shapes[] = {{"attn_qkv 2560->10240", 2560, 10240}, {"attn_gate 2560->6144", 2560, 6144},
                            {"ssm_out 6144->2560", 6144, 2560},    {"hc_down 10240->320", 10240, 320},
                            {"shexp_gate 2560->640", 2560, 640}};
    Acts a = make_acts(4, 10240);
    float* y = nullptr;
    CUDA_CHECK(cudaMalloc(&y, (size_t)4 * 248320 * 4));
    for (GgmlType t : {GgmlType::Q2_0, GgmlType::IQ2_XS, GgmlType::Q4_K})
        for (const Shape& sh : shapes) {
            uint8_t* w = upload_rows(t, sh.rows, sh.n);
            for (int T : {1, 4})
                time_case(s, "dense", std::string(sh.name) + " T=" + std::to_string(T), dense_args(t, w, sh.n, sh.rows),
                          a, T, T, y, ggml_row_bytes(t, sh.n) * sh.rows, 200);
            cudaFree(w);
        }
    for (GgmlType t : {GgmlType::Q2_0, GgmlType::IQ4_NL}) {   // shared expert down, n = 640
        uint8_t* w = upload_rows(t, 2560, 640);
        for (int T : {1, 4})
            time_case(s, "dense", "shexp_down 640->2560 T=" + std::to_string(T), dense_args(t, w, 640, 2560), a, T, T,
                      y, ggml_row_bytes(t, 640) * 2560, 200);
        cudaFree(w);
    }
    bench_head(s, a, y);
    cudaFree(y);
    free_acts(a);
}

// T tokens × top-10 of 512 experts. T = 4: each token takes 10 of the same 20 experts, so pairs share experts.
void bench_experts(cudaStream_t s) {
    const int E = 512, k = 10, H = 2560, I = 640;
    Acts a = make_acts(4 * k, H);
    float* y = nullptr;
    CUDA_CHECK(cudaMalloc(&y, (size_t)4 * k * H * 4));
    int32_t* d_ids = nullptr;
    CUDA_CHECK(cudaMalloc(&d_ids, 4 * k * 4));
    const ExpertMatrix mats[] = {{"gate_exps", GgmlType::Q2_0, H, I, k},    {"gate_exps", GgmlType::IQ2_XS, H, I, k},
                                 {"gate_exps", GgmlType::IQ3_XXS, H, I, k}, {"down_exps", GgmlType::Q2_0, I, H, 1},
                                 {"down_exps", GgmlType::IQ4_NL, I, H, 1}};
    for (const ExpertMatrix& mt : mats) {
        const size_t row_bytes = ggml_row_bytes(mt.type, mt.n);
        uint8_t* w = upload_rows(mt.type, (int64_t)E * mt.rows, mt.n);
        for (int T : {1, 4}) {
            std::vector<int32_t> ids;
            std::vector<int> pool(E);
            for (int i = 0; i < E; ++i) pool[i] = i;
            std::shuffle(pool.begin(), pool.end(), rng);
            for (int t = 0; t < T; ++t) {
                std::vector<int> mine(pool.begin(), pool.begin() + (T == 1 ? k : 2 * k));
                std::shuffle(mine.begin(), mine.end(), rng);
                ids.insert(ids.end(), mine.begin(), mine.begin() + k);
            }
            std::vector<int32_t> uniq = ids;
            std::sort(uniq.begin(), uniq.end());
            uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
            CUDA_CHECK(cudaMemcpy(d_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
            cuda::MatmulArgs m = dense_args(mt.type, w, mt.n, mt.rows);
            m.mat_stride = row_bytes * mt.rows;
            m.ids = d_ids;
            m.act_div = mt.act_div;
            const int P = T * k, act_rows = mt.act_div == 1 ? P : T;
            time_case(s, "experts", std::string(mt.name) + " T=" + std::to_string(T) + " (" +
                                        std::to_string(uniq.size()) + " experts)",
                      m, a, act_rows, P, y, uniq.size() * m.mat_stride, 200);
        }
        cudaFree(w);
    }
    cudaFree(d_ids);
    cudaFree(y);
    free_acts(a);
}

// The decode pass's own dense matmuls (round 1 profile, tests/gpu/results/2026-11-30-round1): the GDN input
// projections as one matrix (qkv 10240 + z 6144 + beta 48 + alpha 48 rows, upload_together), ssm_out, hc_down, the
// F32 router and a BF16 2560 -> 512, at T = 1, 2, 4, 8 (decode and MTP verify); activation quantization included.
void bench_decode(cudaStream_t s) {
    struct Shape {
        const char* name;
        GgmlType type;
        int n;
        int64_t rows;
    };
    const Shape shapes[] = {{"gdn_in_proj 2560->16480", GgmlType::Q2_0, 2560, 16480},
                            {"gdn_in_proj 2560->16480", GgmlType::IQ2_XS, 2560, 16480},
                            {"gdn_qkv 2560->10240", GgmlType::Q4_K, 2560, 10240},
                            {"ssm_out 6144->2560", GgmlType::Q2_0, 6144, 2560},
                            {"ssm_out 6144->2560", GgmlType::IQ2_XS, 6144, 2560},
                            {"hc_down 10240->320", GgmlType::Q2_0, 10240, 320},
                            {"router 2560->512", GgmlType::F32, 2560, 512},
                            {"attn_kv 2560->512", GgmlType::BF16, 2560, 512},
                            {"attn_q 2560->8192", GgmlType::Q2_0, 2560, 8192}};
    Acts a = make_acts(8, 10240);
    float* y = nullptr;
    CUDA_CHECK(cudaMalloc(&y, (size_t)8 * 16480 * 4));
    for (const Shape& sh : shapes) {
        uint8_t* w = upload_rows(sh.type, sh.rows, sh.n);
        for (int T : {1, 2, 4, 8})
            time_case(s, "decode", std::string(sh.name) + " T=" + std::to_string(T), dense_args(sh.type, w, sh.n, sh.rows),
                      a, T, T, y, ggml_row_bytes(sh.type, sh.n) * sh.rows, 200);
        cudaFree(w);
    }
    cudaFree(y);
    free_acts(a);
}

// The MoE calls of a decode pass as the backend makes them, quantization of x included: routed experts (512 of H 2560
// x I 640, top-10 of T = 1 token) and the shared expert (I 640, T = 1, 2, 4, 8), in the expert formats of the
// published files (GGUF.md §4) and the synthetic Q2_0. The two-launch path (cuda::moe_decode / shexp_decode) when it
// takes the call, else (STRATA_CUDA_MOE_DECODE=0, or T·k > 16) the five / four launches it replaces.
void bench_moe(cudaStream_t s) {
    const int E = 512, k = 10, H = 2560, I = 640;
    struct Mix {
        GgmlType gate, down;
    };
    const Mix mixes[] = {{GgmlType::Q2_0, GgmlType::Q2_0}, {GgmlType::IQ2_XS, GgmlType::IQ4_NL},
                         {GgmlType::IQ3_XXS, GgmlType::IQ4_NL}, {GgmlType::Q2_K, GgmlType::Q4_0}};
    Acts a = make_acts(8, H);
    float *y = nullptr, *g = nullptr, *u = nullptr, *down = nullptr, *gvec = nullptr, *wts = nullptr;
    const int Pmax = 8 * k;
    CUDA_CHECK(cudaMalloc(&y, (size_t)8 * H * 4));
    CUDA_CHECK(cudaMalloc(&g, (size_t)Pmax * I * 4));
    CUDA_CHECK(cudaMalloc(&u, (size_t)Pmax * I * 4));
    CUDA_CHECK(cudaMalloc(&down, (size_t)Pmax * H * 4));
    CUDA_CHECK(cudaMalloc(&gvec, (size_t)H * 4));
    CUDA_CHECK(cudaMemset(gvec, 0, (size_t)H * 4));
    std::vector<float> w_host(Pmax, 0.1f);
    CUDA_CHECK(cudaMalloc(&wts, Pmax * 4));
    CUDA_CHECK(cudaMemcpy(wts, w_host.data(), Pmax * 4, cudaMemcpyHostToDevice));
    Acts h = make_acts(Pmax, I);
    int32_t* d_ids = nullptr;
    CUDA_CHECK(cudaMalloc(&d_ids, Pmax * 4));
    CUDA_CHECK(cudaMemset(d_ids, 0, Pmax * 4));
    void* scratch = nullptr;
    const size_t scratch_bytes = cuda::moe_decode_scratch_bytes(Pmax, I);
    CUDA_CHECK(cudaMalloc(&scratch, scratch_bytes));
    for (const Mix& mix : mixes) {
        const std::string types = std::string(ggml_type_name(mix.gate)) + "/" + ggml_type_name(mix.down);
        const int ba = cuda::act_block(mix.gate), bh = cuda::act_block(mix.down);
        // routed: 512 experts, T = 1 takes 10 distinct ones (all three matrices read once each)
        uint8_t *wg = upload_rows(mix.gate, (int64_t)E * I, H), *wu = upload_rows(mix.gate, (int64_t)E * I, H);
        uint8_t* wd = upload_rows(mix.down, (int64_t)E * H, I);
        std::vector<int32_t> ids(k);
        std::vector<int> pool(E);
        for (int i = 0; i < E; ++i) pool[i] = i;
        std::shuffle(pool.begin(), pool.end(), rng);
        for (int j = 0; j < k; ++j) ids[j] = pool[j];
        int32_t* r_ids = nullptr;
        CUDA_CHECK(cudaMalloc(&r_ids, k * 4));
        CUDA_CHECK(cudaMemcpy(r_ids, ids.data(), k * 4, cudaMemcpyHostToDevice));
        auto expert = [&](GgmlType t, const uint8_t* w, int n, int rows, const int32_t* id, int act_div, bool many) {
            cuda::MatmulArgs m = dense_args(t, w, n, rows);
            m.mat_stride = many ? m.row_bytes * rows : 0;
            m.ids = id;
            m.act_div = act_div;
            return m;
        };
        // fq: the decode path's gate/up kernel quantizes x itself (no quantize_act launch)
        auto run = [&](const cuda::MatmulArgs& mg, const cuda::MatmulArgs& mu, const cuda::MatmulArgs& md, int T, int kk,
                       bool shared, bool fq = false) {
            const int P = T * kk;
            const bool decode = cuda::moe_decode_supported(mg, mu, md, P);
            if (!(decode && fq)) cuda::quantize_act(s, ba, a.x, T, H, a.q);
            if (decode) {
                const cuda::ActQ8 act = fq ? cuda::ActQ8{} : a.q;
                if (shared) cuda::shexp_decode(s, mg, mu, md, act, a.x, gvec, T, scratch, scratch_bytes, y);
                else cuda::moe_decode(s, mg, mu, md, act, a.x, wts, T, kk, scratch, scratch_bytes, y);
                return;
            }
            if (!cuda::moe_gate_up(s, mg, mu, a.q, P, g)) {
                cuda::matmul(s, mg, a.x, a.q, P, g);
                cuda::matmul(s, mu, a.x, a.q, P, u);
                cuda::swiglu(s, g, u, (size_t)P * I, g);
            }
            cuda::quantize_act(s, bh, g, P, I, h.q);
            cuda::matmul(s, md, g, h.q, P, down);
            if (shared) cuda::shexp_gated_add(s, a.x, gvec, down, T, H, y);
            else cuda::moe_combine(s, down, wts, T, kk, H, y);
        };
        const size_t expert_bytes = 2 * ggml_row_bytes(mix.gate, H) * I + ggml_row_bytes(mix.down, I) * H;
        {
            const cuda::MatmulArgs mg = expert(mix.gate, wg, H, I, r_ids, k, true), mu = expert(mix.gate, wu, H, I, r_ids, k, true);
            const cuda::MatmulArgs md = expert(mix.down, wd, I, H, r_ids, 1, true);
            time_fn(s, "moe", "routed top-10 T=1 " + types, mix.gate, H, I, 1, k, k * expert_bytes, 200,
                    [&] { run(mg, mu, md, 1, k, false); });
            time_fn(s, "moe", "routed top-10 T=1 fq " + types, mix.gate, H, I, 1, k, k * expert_bytes, 200,
                    [&] { run(mg, mu, md, 1, k, false, true); });
        }
        // shared expert: one matrix each (the first expert's), ids as the backend passes them (zeros / none)
        for (int T : {1, 2, 4, 8}) {
            const bool fused_path = cuda::moe_decode_supported(expert(mix.gate, wg, H, I, nullptr, 1, false),
                                                               expert(mix.gate, wu, H, I, nullptr, 1, false),
                                                               expert(mix.down, wd, I, H, nullptr, 1, false), T);
            const int32_t* sid = fused_path ? nullptr : d_ids;   // moe_gate_up needs ids: all zeros, one matrix
            const cuda::MatmulArgs mg = expert(mix.gate, wg, H, I, sid, 1, false), mu = expert(mix.gate, wu, H, I, sid, 1, false);
            const cuda::MatmulArgs md = expert(mix.down, wd, I, H, nullptr, 1, false);
            time_fn(s, "moe", "shared T=" + std::to_string(T) + " " + types, mix.gate, H, I, T, T, expert_bytes, 200,
                    [&] { run(mg, mu, md, T, 1, true); });
            if (T == 1)
                time_fn(s, "moe", "shared T=1 fq " + types, mix.gate, H, I, T, T, expert_bytes, 200,
                        [&] { run(mg, mu, md, T, 1, true, true); });
        }
        for (void* p : {(void*)wg, (void*)wu, (void*)wd, (void*)r_ids}) cudaFree(p);
    }
    for (void* p : {(void*)y, (void*)g, (void*)u, (void*)down, (void*)gvec, (void*)wts, (void*)d_ids, scratch})
        cudaFree(p);
    free_acts(h);
    free_acts(a);
}

// Prompt chunks of T = 256 and 1024 tokens: one matrix (attn_qkv 2560 -> 10240), gate_exps (2560 -> 640) and
// down_exps (640 -> 2560) over 512 experts, top-10 per token drawn at random. All take the tiled kernels (T >=
// cuda::kTiledMinRows): each case with the f32 tiled kernel and with the tensor-core one (" mmq", STRATA_CUDA_MMQ's
// kernel, matmul_mmq.cuh; " mmq per chunk": without its super-block integer sums, STRATA_CUDA_MMQ_SUPER=0).
void bench_prompt(cudaStream_t s) {
    const int E = 512, k = 10, H = 2560, I = 640, Tmax = 1024;
    Acts a = make_acts(Tmax * k, H);   // down_exps reads one row per pair
    float* y = nullptr;
    CUDA_CHECK(cudaMalloc(&y, (size_t)Tmax * k * H * 4));
    int32_t* d_ids = nullptr;
    CUDA_CHECK(cudaMalloc(&d_ids, (size_t)Tmax * k * 4));
    void* sort_scratch = nullptr;
    CUDA_CHECK(cudaMalloc(&sort_scratch, cuda::expert_order_bytes(Tmax * k, E)));
    for (int mmq : {0, 1, 2}) {   // f32 tiles; tensor cores; tensor cores without super-block integer sums
        cuda::tiled_set_mmq(mmq);
        const std::string tag = mmq == 1 ? " mmq" : mmq == 2 ? " mmq per chunk" : "";
        for (GgmlType t : {GgmlType::Q2_0, GgmlType::IQ2_XS, GgmlType::Q4_K}) {
            uint8_t* w = upload_rows(t, 10240, H);
            for (int T : {256, 1024})
                time_case(s, "prompt", "attn_qkv 2560->10240 T=" + std::to_string(T) + tag, dense_args(t, w, H, 10240),
                          a, T, T, y, ggml_row_bytes(t, H) * 10240, 10);
            cudaFree(w);
        }
        const ExpertMatrix cases[] = {{"gate_exps 512x top-10", GgmlType::Q2_0, H, I, k},
                                      {"gate_exps 512x top-10", GgmlType::IQ2_XS, H, I, k},
                                      {"down_exps 512x top-10", GgmlType::Q2_0, I, H, 1},
                                      {"down_exps 512x top-10", GgmlType::IQ4_NL, I, H, 1}};
        for (const ExpertMatrix& c : cases) {
            const size_t row_bytes = ggml_row_bytes(c.type, c.n);
            uint8_t* w = upload_rows(c.type, (int64_t)E * c.rows, c.n);
            for (int T : {256, 1024}) {
                std::vector<int32_t> ids;
                std::vector<int> pool(E);
                for (int i = 0; i < E; ++i) pool[i] = i;
                for (int tt = 0; tt < T; ++tt) {
                    std::shuffle(pool.begin(), pool.end(), rng);
                    ids.insert(ids.end(), pool.begin(), pool.begin() + k);
                }
                CUDA_CHECK(cudaMemcpy(d_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
                cuda::MatmulArgs m = dense_args(c.type, w, c.n, c.rows);
                m.mat_stride = row_bytes * c.rows;
                m.ids = d_ids;
                m.act_div = c.act_div;
                time_case(s, "prompt", std::string(c.name) + " T=" + std::to_string(T) + tag, m, a,
                          c.act_div == 1 ? T * k : T, T * k, y, (size_t)E * m.mat_stride, 10, E, sort_scratch);
            }
            cudaFree(w);
        }
    }
    cuda::tiled_set_mmq(-1);
    cudaFree(sort_scratch);
    cudaFree(d_ids);
    cudaFree(y);
    free_acts(a);
}

}  // namespace

int main(int argc, char** argv) {
    const char* out = nullptr;
    bool quick = false, prompt_only = false, decode_only = false, head_only = false;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--quick") == 0) quick = true;
        else if (std::strcmp(argv[i], "--prompt") == 0) prompt_only = true;
        else if (std::strcmp(argv[i], "--decode") == 0) decode_only = true;
        else if (std::strcmp(argv[i], "--head") == 0) head_only = true;
        else out = argv[i];
    }
    try {
        cudaDeviceProp prop{};
        CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
        std::printf("device: %s\n", prop.name);
        cuda::upload_iq_tables();
        cuda::tiled_upload_tables();
        cudaStream_t s;
        CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        json = std::string("{\"bench\": \"cuda_matmul_speed\", \"device\": \"") + prop.name + "\", \"results\": [\n";
        if (head_only) {
            Acts a = make_acts(4, 10240);
            float* y = nullptr;
            CUDA_CHECK(cudaMalloc(&y, (size_t)4 * 248320 * 4));
            bench_head(s, a, y);
            CUDA_CHECK(cudaFree(y));
            free_acts(a);
        } else if (decode_only) {
            bench_decode(s);
            bench_moe(s);
        } else {
            if (!prompt_only) {
                bench_big(s, quick);
                bench_dense(s);
                bench_experts(s);
                bench_decode(s);
                bench_moe(s);
            }
            bench_prompt(s);
        }
        CUDA_CHECK(cudaStreamSynchronize(s));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "cuda_matmul_speed: error: %s\n", e.what());
        return 2;
    }
    json += "\n]}\n";
    if (out) {
        std::FILE* f = std::fopen(out, "w");
        if (!f) {
            std::fprintf(stderr, "cuda_matmul_speed: cannot write %s\n", out);
            return 2;
        }
        std::fputs(json.c_str(), f);
        std::fclose(f);
    }
    return 0;
}
