// CUDA attention, indexer_scores (per query and batched), select_cells and RoPE at long contexts (1 … 32K cells,
// T = 1, 2, 8, 64, GQA, dense (also as device counts with no cell list) and gapped cell lists) against the CPU backend, then µs per call: attention before
// (the one-block-per-head kernel of commit 6127769, copied below) and now, indexer_scores and select_cells at 32K.
// usage: attention_long_test [results.json]
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"
#include "gpu_test_util.h"

using namespace strata;

namespace {

using gputest::rel_err;

std::mt19937 rng(7);
std::string json_checks, json_timings;
int n_checks = 0, n_failed = 0;

std::vector<float> randn(size_t n, float sd = 1.0f) { return gputest::randn(rng, n, sd); }

void report(const std::string& name, double rel, double tol) {
    const bool ok = rel <= tol;
    ++n_checks;
    n_failed += !ok;
    if (!ok || n_checks % 8 == 1) std::printf("%-58s rel %.3e  %s\n", name.c_str(), rel, ok ? "ok" : "FAIL");
    char line[256];
    std::snprintf(line, sizeof line, "%s  {\"name\": \"%s\", \"rel\": %.3e, \"ok\": %s}", json_checks.empty() ? "" : ",\n",
                  name.c_str(), rel, ok ? "true" : "false");
    json_checks += line;
}

void timing(const std::string& name, double us) {
    std::printf("%-58s %10.1f us\n", name.c_str(), us);
    char line[256];
    std::snprintf(line, sizeof line, "%s  {\"name\": \"%s\", \"us\": %.2f}", json_timings.empty() ? "" : ",\n",
                  name.c_str(), us);
    json_timings += line;
}

template <class T>
struct DevBuf {
    T* p = nullptr;
    size_t n = 0;
    explicit DevBuf(size_t count) : n(std::max<size_t>(count, 1)) { CUDA_CHECK(cudaMalloc(&p, n * sizeof(T))); }
    DevBuf(const T* h, size_t count) : DevBuf(count) {
        CUDA_CHECK(cudaMemcpy(p, h, count * sizeof(T), cudaMemcpyHostToDevice));
    }
    explicit DevBuf(const std::vector<T>& h) : DevBuf(h.data(), h.size()) {}
    ~DevBuf() { cudaFree(p); }
    DevBuf(const DevBuf&) = delete;
    DevBuf& operator=(const DevBuf&) = delete;
    std::vector<T> get() const {
        std::vector<T> h(n);
        CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
        return h;
    }
};

// µs per call of f, averaged over enough calls to last ~50 ms (at least 5), after 3 warm-up calls.
template <class F>
double time_us(F f) {
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    for (int i = 0; i < 3; ++i) f();
    CUDA_CHECK(cudaEventRecord(a));
    f();
    CUDA_CHECK(cudaEventRecord(b));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    const int reps = std::max(5, std::min(2000, (int)(50.0 / std::max(ms, 1e-3f))));
    CUDA_CHECK(cudaEventRecord(a));
    for (int i = 0; i < reps; ++i) f();
    CUDA_CHECK(cudaEventRecord(b));
    CUDA_CHECK(cudaEventSynchronize(b));
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    CUDA_CHECK(cudaEventDestroy(a));
    CUDA_CHECK(cudaEventDestroy(b));
    return 1000.0 * ms / reps;
}

// Cell lists of T queries whose first sees n0 cells (query t: positions < n0 + t). dense: all of them; qsa: the
// pattern of select_cells (kb random blocks of cr, ascending, plus the tail) once there are more than kb blocks;
// gaps: each cell kept with probability 2/3, the query's own position always.
enum class Cells { dense, qsa, gaps };

std::vector<std::vector<int32_t>> make_cells(Cells kind, int n0, int T, int cr = 4, int kb = 512) {
    std::vector<std::vector<int32_t>> keep(T);
    std::uniform_int_distribution<int> coin(0, 2);
    for (int t = 0; t < T; ++t) {
        const int M = n0 + t, nb = M / cr;
        if (kind == Cells::dense || (kind == Cells::qsa && nb <= kb)) {
            keep[t].resize(M);
            std::iota(keep[t].begin(), keep[t].end(), 0);
        } else if (kind == Cells::qsa) {
            std::vector<int32_t> blocks(nb);
            std::iota(blocks.begin(), blocks.end(), 0);
            std::shuffle(blocks.begin(), blocks.end(), rng);
            blocks.resize(kb);
            std::sort(blocks.begin(), blocks.end());
            for (int32_t b : blocks)
                for (int j = 0; j < cr; ++j) keep[t].push_back(b * cr + j);
            for (int c = nb * cr; c < M; ++c) keep[t].push_back(c);
        } else {
            for (int c = 0; c < M; ++c)
                if (coin(rng) != 0 || c == M - 1) keep[t].push_back(c);
        }
    }
    return keep;
}

// Random keys and values shared by the attention cases (drawing 2 × 17M normals per case would take seconds):
// at least 2·n floats, K the first n, V the next n.
const float* kv_pool(size_t n) {
    static std::vector<float> pool;
    if (pool.size() < 2 * n) pool = randn(2 * n);
    return pool.data();
}

struct Shape {
    int nh, nkv, hd;
};

// Softmax attention in double precision, on all cores (the arbiter when the CPU backend's float sums disagree).
std::vector<float> exact_attention(const float* q, const float* K, const float* V, int T, const Shape& s,
                                   const std::vector<std::vector<int32_t>>& keep) {
    std::vector<float> o((size_t)T * s.nh * s.hd);
    const int pairs = T * s.nh, n_threads = std::max(1u, std::thread::hardware_concurrency());
    std::vector<std::thread> threads;
    for (int w = 0; w < n_threads; ++w)
        threads.emplace_back([&, w] {
            std::vector<double> p, acc(s.hd);
            for (int i = w; i < pairs; i += n_threads) {
                const int t = i / s.nh, h = i % s.nh, kvh = h / (s.nh / s.nkv);
                const float* qh = q + (size_t)i * s.hd;
                const std::vector<int32_t>& cells = keep[t];
                p.resize(cells.size());
                double mx = -INFINITY, sum = 0;
                for (size_t c = 0; c < cells.size(); ++c) {
                    const float* kc = K + ((size_t)cells[c] * s.nkv + kvh) * s.hd;
                    double d = 0;
                    for (int j = 0; j < s.hd; ++j) d += (double)qh[j] * kc[j];
                    p[c] = d / std::sqrt((double)s.hd);
                    mx = std::max(mx, p[c]);
                }
                std::fill(acc.begin(), acc.end(), 0.0);
                for (size_t c = 0; c < cells.size(); ++c) {
                    const double w8 = std::exp(p[c] - mx);
                    const float* vc = V + ((size_t)cells[c] * s.nkv + kvh) * s.hd;
                    sum += w8;
                    for (int j = 0; j < s.hd; ++j) acc[j] += w8 * vc[j];
                }
                for (int j = 0; j < s.hd; ++j) o[(size_t)i * s.hd + j] = (float)(acc[j] / sum);
            }
        });
    for (std::thread& th : threads) th.join();
    return o;
}

// One attention case: the CPU backend's result against the CUDA kernel with the chunk count picked
// automatically, with one block per (query, head), and with the most chunks allowed; dense cases also with their
// counts on the device (cells null) and max_cells a rounded-up bound or unknown.
void check_attention(CpuBackend& cpu, const Shape& s, Cells kind, int n0, int T) {
    const size_t kv = (size_t)(n0 + T) * s.nkv * s.hd;
    const std::vector<float> q = randn((size_t)T * s.nh * s.hd, 2.0f);
    const float *K = kv_pool(kv), *V = kv_pool(kv) + kv;
    const auto keep = make_cells(kind, n0, T);
    std::vector<float> want((size_t)T * s.nh * s.hd);
    cpu.attention(q.data(), K, V, T, s.nh, s.nkv, s.hd, keep, want.data());

    std::vector<int32_t> flat(T + 1, 0);
    for (int t = 0; t < T; ++t) flat[t + 1] = flat[t] + (int32_t)keep[t].size();
    for (int t = 0; t < T; ++t) flat.insert(flat.end(), keep[t].begin(), keep[t].end());
    DevBuf<float> dq(q), dK(K, kv), dV(V, kv), dout(want.size());
    DevBuf<int32_t> dflat(flat);
    const int32_t* off = kind == Cells::dense ? nullptr : dflat.p;
    const int32_t* cells = kind == Cells::dense ? nullptr : dflat.p + T + 1;
    const int most = std::min(128, 4096 / (T * s.nh));
    std::vector<float> exact;      // the double-precision reference, made when needed
    struct Plan {
        int chunks, grouped;    // as cuda::attention takes them (−1: automatic)
    };
    // One run: off, cells as cuda::attention takes them; max_cells its bound on the cells of a query (−1: unknown).
    auto check = [&](const Plan plan, const int32_t* off, const int32_t* cells, int max_cells, const char* suffix) {
        CUDA_CHECK(cudaMemset(dout.p, 0xff, dout.n * sizeof(float)));     // NaN: every output must be written
        cuda::attention(nullptr, dq.p, dK.p, dV.p, T, s.nh, s.nkv, s.hd, off, cells, n0, dout.p, plan.chunks,
                        plan.grouped, max_cells);
        const std::vector<float> got = dout.get();
        char name[192];
        std::snprintf(name, sizeof name, "attention %s n0=%d T=%d nh=%d/%d hd=%d chunks=%s grouped=%s%s",
                      kind == Cells::dense ? "dense" : kind == Cells::qsa ? "qsa" : "gaps", n0, T, s.nh, s.nkv, s.hd,
                      plan.chunks < 0 ? "auto" : std::to_string(plan.chunks).c_str(),
                      plan.grouped < 0 ? "auto" : std::to_string(plan.grouped).c_str(), suffix);
        double rel = rel_err(got, want);
        if (rel > 1e-5) {
            // The CPU's float sums over 32K cells can themselves be ~1e-5 off: then a GPU result within 1e-5 of the
            // double-precision softmax and closer to it than the CPU's passes.
            if (exact.empty()) exact = exact_attention(q.data(), K, V, T, s, keep);
            const double gpu_exact = rel_err(got, exact), cpu_exact = rel_err(want, exact);
            std::printf("%s: rel %.3e to the CPU; to double precision: GPU %.3e, CPU %.3e\n", name, rel, gpu_exact,
                        cpu_exact);
            if (gpu_exact <= 1e-5 && gpu_exact <= cpu_exact) rel = gpu_exact;
        }
        report(name, rel, 1e-5);
    };
    for (const Plan plan :
         {Plan{-1, -1}, Plan{1, -1}, Plan{-1, 0}, Plan{most, 0}, Plan{1, 1}, Plan{-1, 1}, Plan{most, 1}})
        check(plan, off, cells, -1, "");
    if (kind != Cells::dense) return;
    // Dense counts on the device (cells null, off the counts n0 + t; what a decode pass replayed as one graph passes):
    // the chunk count from the caller's bound rounded up, or unknown.
    const int bound = (n0 + T - 1 + 1023) / 1024 * 1024;
    for (const Plan plan : {Plan{-1, -1}, Plan{-1, 1}, Plan{most, 0}}) {
        check(plan, dflat.p, nullptr, bound, " counts max_cells=bound");
        check(plan, dflat.p, nullptr, -1, " counts max_cells=-1");
    }
}

// At the model's shape (16 heads over 2 kv heads, hd 256): one block per head, the split with and without GQA
// grouping, grouped without split, and the automatic choice. (The kernel before the split, commit 6127769: its
// timings are in tests/gpu/results/2026-11-30-round{1,2}/attention_long.log.)
void time_attention(int n0, Cells kind, int T) {
    const Shape s{16, 2, 256};
    const int rows = n0 + T;
    DevBuf<float> dq(randn((size_t)T * s.nh * s.hd)), dK(randn((size_t)rows * s.nkv * s.hd)),
        dV(randn((size_t)rows * s.nkv * s.hd)), dout((size_t)T * s.nh * s.hd);
    const auto keep = make_cells(kind, n0, T);
    std::vector<int32_t> flat(T + 1, 0);
    for (int t = 0; t < T; ++t) flat[t + 1] = flat[t] + (int32_t)keep[t].size();
    for (int t = 0; t < T; ++t) flat.insert(flat.end(), keep[t].begin(), keep[t].end());
    DevBuf<int32_t> dflat(flat);
    const int32_t* off = kind == Cells::dense ? nullptr : dflat.p;
    const int32_t* cells = kind == Cells::dense ? nullptr : dflat.p + T + 1;
    const std::string what = std::string(kind == Cells::dense ? "dense " : "qsa ") + std::to_string(keep[0].size()) +
                             " cells T=" + std::to_string(T);
    timing("attention one block           " + what, time_us([&] {
               cuda::attention(nullptr, dq.p, dK.p, dV.p, T, s.nh, s.nkv, s.hd, off, cells, n0, dout.p, 1);
           }));
    timing("attention split (4 warps/head) " + what, time_us([&] {
               cuda::attention(nullptr, dq.p, dK.p, dV.p, T, s.nh, s.nkv, s.hd, off, cells, n0, dout.p, -1, 0);
           }));
    timing("attention split grouped       " + what, time_us([&] {
               cuda::attention(nullptr, dq.p, dK.p, dV.p, T, s.nh, s.nkv, s.hd, off, cells, n0, dout.p, -1, 1);
           }));
    timing("attention grouped one block   " + what, time_us([&] {
               cuda::attention(nullptr, dq.p, dK.p, dV.p, T, s.nh, s.nkv, s.hd, off, cells, n0, dout.p, 1, 1);
           }));
    timing("attention auto                " + what, time_us([&] {
               cuda::attention(nullptr, dq.p, dK.p, dV.p, T, s.nh, s.nkv, s.hd, off, cells, n0, dout.p);
           }));
}

// QSA block scores for T queries at positions P … P+T−1 and the cells select_cells picks, both against the CPU
// backend (cells exactly), then their µs per call. ties: scores rounded to halves (exact ties at the budget).
void check_select(CpuBackend& cpu, int P, int T, bool ties, bool timed) {
    const int cr = 4, kb = 512, ni = 4, di = 128, stride = (P + T) / cr;
    const float scale = 1.0f / std::sqrt((float)di);
    const std::vector<float> qi = randn((size_t)T * ni * di), kblock = randn((size_t)stride * di);
    std::vector<float> scores((size_t)T * stride, 0.0f);
    std::vector<int32_t> pos(T);
    for (int t = 0; t < T; ++t) pos[t] = P + t;
    cpu.indexer_scores(qi.data(), kblock.data(), T, pos.data(), cr, ni, di, scale, scores.data(), stride);
    DevBuf<float> dqi(qi), dkb(kblock), dscores(scores.size());
    DevBuf<int32_t> dpos(pos);
    CUDA_CHECK(cudaMemset(dscores.p, 0, dscores.n * sizeof(float)));
    auto run_scores = [&] {
        for (int t = 0; t < T; ++t)
            cuda::indexer_scores(nullptr, dqi.p + (size_t)t * ni * di, dkb.p, (P + t + 1) / cr, ni, di, scale,
                                 dscores.p + (size_t)t * stride);
    };
    run_scores();
    const std::string at = " P=" + std::to_string(P) + " T=" + std::to_string(T);
    report("indexer_scores" + at, rel_err(dscores.get(), scores), 1e-5);
    DevBuf<float> drows(scores.size());
    CUDA_CHECK(cudaMemset(drows.p, 0, drows.n * sizeof(float)));
    auto run_rows = [&] { cuda::indexer_scores_rows(nullptr, dqi.p, dkb.p, T, dpos.p, cr, ni, di, scale, drows.p, stride); };
    run_rows();
    report("indexer_scores_rows" + at, rel_err(drows.get(), scores), 1e-5);

    if (ties)
        for (float& v : scores) v = std::round(v * 2) / 2;
    std::vector<int32_t> off(T + 1, 0);
    for (int t = 0; t < T; ++t) {
        const int M = P + t + 1, nb = M / cr;
        off[t + 1] = off[t] + (nb > kb ? kb * cr + (M - nb * cr) : M);
    }
    std::vector<int32_t> want(off[T]);
    cpu.select_cells(scores.data(), stride, T, pos.data(), cr, kb, off.data(), want.data());
    DevBuf<float> dsel(scores);
    DevBuf<int32_t> doff(off), dcells(want.size());
    DevBuf<char> scratch(cuda::select_cells_scratch_bytes(T, stride));
    auto run_select = [&] {
        cuda::select_cells(nullptr, dsel.p, stride, T, dpos.p, cr, kb, doff.p, dcells.p, scratch.p);
    };
    run_select();
    const std::vector<int32_t> got = dcells.get();
    size_t wrong = 0;
    for (size_t i = 0; i < want.size(); ++i) wrong += got[i] != want[i];
    report("select_cells" + at + (ties ? " ties" : ""), wrong ? 1.0 : 0.0, 0.0);
    if (!timed) return;
    timing("indexer_scores (" + std::to_string(T) + " launches)" + at, time_us(run_scores));
    timing("indexer_scores_rows (1 launch)" + at, time_us(run_rows));
    timing("select_cells" + at + (ties ? " ties" : ""), time_us(run_select));
}

// RoPE at long-context positions (the angle grows with the position, so cos/sin see large arguments).
void check_rope_long(CpuBackend& cpu) {
    const std::vector<int32_t> pos = {0, 1, 4095, 32767, 32831};
    const int T = (int)pos.size();
    for (const Shape s : {Shape{16, 2, 256}, Shape{4, 1, 128}}) {
        const int n_rot = 64;
        std::vector<float> x = randn((size_t)T * s.nh * s.hd), want = x;
        cpu.rope(want.data(), T, s.nh, s.hd, n_rot, 1e7f, pos.data());
        DevBuf<float> dx(x);
        DevBuf<int32_t> dpos(pos);
        cuda::rope(nullptr, dx.p, T, s.nh, s.hd, n_rot, 1e7f, dpos.p, 0);
        report("rope positions to 32831 heads=" + std::to_string(s.nh) + " hd=" + std::to_string(s.hd),
               rel_err(dx.get(), want), 1e-5);
    }
}

}  // namespace

int main(int argc, char** argv) {
    try {
        CpuBackend cpu(0);
        int dev = 0;
        cudaDeviceProp prop{};
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
        std::printf("device: %s, %d SMs; split chunks at T=1, 16 heads: %d, grouped %d\n", prop.name,
                    prop.multiProcessorCount, cuda::attention_chunks(1, 16, -1, false),
                    cuda::attention_chunks(1, 16, -1, true));

        kv_pool((size_t)(32768 + 64) * 2 * 256);      // the largest case first, so the pool is drawn once
        const Shape model{16, 2, 256};
        for (int T : {1, 2, 8, 64})
            for (int n0 : {1, 3, 100, 1024, 4096, 32768})
                for (Cells kind : {Cells::dense, Cells::qsa, Cells::gaps}) {
                    if (kind == Cells::qsa && n0 < 4096) continue;                  // qsa == dense below kb blocks
                    if (T == 64 && n0 == 32768 && kind != Cells::qsa) continue;     // CPU reference too slow
                    check_attention(cpu, model, kind, n0, T);
                }
        for (const Shape s : {Shape{8, 1, 128}, Shape{4, 4, 64}, Shape{6, 2, 32}, Shape{2, 1, 80}})
            for (int T : {1, 8})
                for (int n0 : {5, 1000, 32768})
                    check_attention(cpu, s, n0 > 5 ? Cells::gaps : Cells::dense, n0, T);

        check_rope_long(cpu);
        check_select(cpu, 3000, 3, false, false);
        check_select(cpu, 3000, 3, true, false);
        check_select(cpu, 32767, 1, false, true);
        check_select(cpu, 32704, 64, false, true);
        check_select(cpu, 32767, 1, true, true);
        check_select(cpu, 4095, 1, true, true);

        for (int n0 : {1024, 4096, 32768}) time_attention(n0, Cells::dense, 1);
        time_attention(32768, Cells::qsa, 1);
        time_attention(4096, Cells::qsa, 8);
        time_attention(1024, Cells::dense, 64);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "attention_long_test: error: %s\n", e.what());
        return 2;
    }
    std::printf("attention_long_test: %d checks, %d failed\n", n_checks, n_failed);
    if (argc > 1) {
        std::FILE* f = std::fopen(argv[1], "w");
        if (f) {
            std::fprintf(f, "{\"checks\": [\n%s\n], \"timings\": [\n%s\n], \"failed\": %d}\n", json_checks.c_str(),
                         json_timings.c_str(), n_failed);
            std::fclose(f);
        }
    }
    return n_failed ? 1 : 0;
}
