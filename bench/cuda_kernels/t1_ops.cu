// µs per call of the small decode ops at the full model's shapes (H 2560, 4 streams, r 320, 512 experts top-10) for
// T = 1, 2, 8: hyper_read, route_topk, rms_norm, hyper_inject, each the current kernel and the one it replaced
// (t1_variants.h); hyper_read also with its second kernel as a programmatic dependent launch. Also checks that the
// two agree and that the current one repeats bit for bit. Writes JSON.
// usage: t1_ops OUT.json [ITERS]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "../../tests/gpu/random_blocks.h"
#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/kernels/t1_variants.h"
#include "gguf/ggml_types.h"

using namespace strata;

namespace {

#define CK(call)                                                                                                   \
    do {                                                                                                           \
        const cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) {                                                                                   \
            std::fprintf(stderr, "t1_ops: %s failed: %s (line %d)\n", #call, cudaGetErrorString(e_), __LINE__);   \
            std::exit(2);                                                                                          \
        }                                                                                                          \
    } while (0)

constexpr int kH = 2560, kN = 4, kR = 320, kE = 512, kK = 10;
std::mt19937 rng(7);
cudaStream_t stream;
int iters = 200;

template <class T>
T* upload(const std::vector<T>& h) {
    T* d = nullptr;
    CK(cudaMalloc(&d, h.size() * sizeof(T) + 256));
    CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

std::vector<float> randn(size_t n, float sd = 1.0f) {
    std::normal_distribution<float> d(0.0f, sd);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

std::vector<float> download(const float* d, size_t n) {
    std::vector<float> h(n);
    CK(cudaStreamSynchronize(stream));
    CK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

// µs per call: `iters` calls launched one by one on the stream, and the same calls captured once as a CUDA graph and
// replayed (what a decode step does: no host launch cost in the figure).
struct Timing {
    double stream_us, graph_us;
};

Timing time_op(const std::function<void()>& op) {
    for (int i = 0; i < 20; ++i) op();
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaStreamSynchronize(stream));
    CK(cudaEventRecord(a, stream));
    for (int i = 0; i < iters; ++i) op();
    CK(cudaEventRecord(b, stream));
    CK(cudaEventSynchronize(b));
    float ms_stream = 0;
    CK(cudaEventElapsedTime(&ms_stream, a, b));

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
    for (int i = 0; i < iters; ++i) op();
    CK(cudaStreamEndCapture(stream, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaGraphLaunch(exec, stream));   // warm
    const int reps = 5;
    CK(cudaEventRecord(a, stream));
    for (int i = 0; i < reps; ++i) CK(cudaGraphLaunch(exec, stream));
    CK(cudaEventRecord(b, stream));
    CK(cudaEventSynchronize(b));
    float ms_graph = 0;
    CK(cudaEventElapsedTime(&ms_graph, a, b));
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return {1000.0 * ms_stream / iters, 1000.0 * ms_graph / (reps * iters)};
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num = std::fmax(num, std::fabs((double)a[i] - b[i]));
        den = std::fmax(den, std::fabs((double)b[i]));
    }
    return den > 0 ? num / den : num;
}

std::string json;
int failures = 0;
void add_row(const std::string& op, const std::string& detail, int T, const Timing& old_t, const Timing& new_t,
             double rel, double tol, bool repeat) {
    const bool ok = rel <= tol && repeat;
    failures += !ok;
    std::printf("%-12s %-26s T=%d  before %7.2f us graph %7.2f stream  now %7.2f us graph %7.2f stream  "
                "rel %.1e (tol %.0e) %s%s\n",
                op.c_str(), detail.c_str(), T, old_t.graph_us, old_t.stream_us, new_t.graph_us, new_t.stream_us, rel,
                tol, repeat ? "repeats" : "NOT REPEATABLE", rel <= tol ? "" : " FAIL");
    char buf[640];
    std::snprintf(buf, sizeof buf,
                  "%s\n  {\"op\": \"%s\", \"detail\": \"%s\", \"T\": %d, \"before_graph_us\": %.3f, "
                  "\"before_stream_us\": %.3f, \"now_graph_us\": %.3f, \"now_stream_us\": %.3f, \"rel_now_vs_before\": "
                  "%.3e, \"tol\": %.0e, \"bitwise_repeat\": %s, \"ok\": %s}",
                  json.empty() ? "" : ",", op.c_str(), detail.c_str(), T, old_t.graph_us, old_t.stream_us,
                  new_t.graph_us, new_t.stream_us, rel, tol, repeat ? "true" : "false", ok ? "true" : "false");
    json += buf;
}

// Runs before and now once each (outputs compared: rel ≤ tol), now twice (bits compared), then times both; prep (if
// any) runs before each compared call.
void bench(const std::string& op, const std::string& detail, int T, double tol, const std::function<void()>& before,
           const std::function<void()>& now, const std::function<std::vector<float>()>& out,
           const std::function<void()>& prep = [] {}) {
    prep();
    before();
    const std::vector<float> want = out();
    prep();
    now();
    const std::vector<float> got = out();
    prep();
    now();
    const std::vector<float> again = out();
    const bool repeat = std::memcmp(got.data(), again.data(), got.size() * sizeof(float)) == 0;
    const Timing t_old = time_op(before), t_new = time_op(now);
    add_row(op, detail, T, t_old, t_new, rel_diff(got, want), tol, repeat);
}

void bench_hyper_read(GgmlType down_t, GgmlType up_t, bool with_inj) {
    const int nH = kN * kH;
    std::vector<float> norm = randn(nH, 0.3f);
    for (float& v : norm) v += 1.0f;
    cuda::HyperReadArgs a;
    a.norm = upload(norm);
    a.norm_len = nH;
    a.down_type = a.inject_type = down_t;
    a.up_type = up_t;
    a.down = upload(gputest::random_rows(down_t, kR, nH, rng));
    a.inject = upload(gputest::random_rows(down_t, kN, nH, rng));
    a.up = upload(gputest::random_rows(up_t, nH, kR, rng));
    a.down_rb = a.inject_rb = ggml_row_bytes(down_t, nH);
    a.up_rb = ggml_row_bytes(up_t, kR);
    a.n = kN;
    a.H = kH;
    a.r = kR;
    a.eps = 1e-6f;
    const bool is_plain = down_t == GgmlType::BF16 && up_t == GgmlType::BF16;
    for (int T : {1, 2, 4, 8}) {   // 4: a speculative verify window
        if (!cuda::hyper_read_supported(a, T)) {
            std::printf("hyper_read %s/%s T=%d: not supported\n", ggml_type_name(down_t), ggml_type_name(up_t), T);
            continue;
        }
        float* X = upload(randn((size_t)T * nH));
        float *u, *inj;
        void* scratch;
        CK(cudaMalloc(&u, (size_t)T * kH * sizeof(float)));
        CK(cudaMalloc(&inj, (size_t)T * kN * sizeof(float)));
        CK(cudaMalloc(&scratch, cuda::hyper_read_scratch_bytes(a, T)));
        float* inj_arg = with_inj ? inj : nullptr;
        const std::string detail = std::string(ggml_type_name(down_t)) + "/" + ggml_type_name(up_t) +
                                   (with_inj ? " inj" : "");
        // Q8 activations: a sum in another order can move an int8 one step (cuda_ops_test allows 1e-2 against the CPU)
        bench("hyper_read", detail, T, is_plain ? 1e-4 : 1e-2,
              [&] { cuda::hyper_read_v1(stream, a, X, T, scratch, u, inj_arg); },
              [&] { cuda::hyper_read(stream, a, X, T, scratch, u, inj_arg); },
              [&] {
                  std::vector<float> o = download(u, (size_t)T * kH);
                  if (with_inj) {
                      const std::vector<float> i = download(inj, (size_t)T * kN);
                      o.insert(o.end(), i.begin(), i.end());
                  }
                  return o;
              });
        // A switch of the current kernels, off against on, under the same name
        auto switch_ab = [&](const std::string& label, void (*set)(int)) {
            bench("hyper_read", detail + " " + label, T, 1e-2,
                  [&] {
                      set(0);
                      cuda::hyper_read(stream, a, X, T, scratch, u, inj_arg);
                  },
                  [&] {
                      set(1);
                      cuda::hyper_read(stream, a, X, T, scratch, u, inj_arg);
                  },
                  [&] { return download(u, (size_t)T * kH); });
            set(-1);
        };
        if (T == 1 && !is_plain) switch_ab("one-pass", cuda::hyper_read_set_one_pass);   // kernel 1's prologue
        CK(cudaFree(X));
        CK(cudaFree(u));
        CK(cudaFree(inj));
        CK(cudaFree(scratch));
    }
}

void bench_route_topk() {
    for (int T : {1, 2, 8}) {
        float* logits = upload(randn((size_t)T * kE, 2.0f));
        int32_t* ids;
        float* w;
        CK(cudaMalloc(&ids, (size_t)T * kK * sizeof(int32_t)));
        CK(cudaMalloc(&w, (size_t)T * kK * sizeof(float)));
        // ids as floats for the comparison: sorted by id per token (the order of equal weights is free).
        const auto out = [&] {
            std::vector<int32_t> hi((size_t)T * kK);
            std::vector<float> hw = download(w, (size_t)T * kK), o;
            CK(cudaMemcpy(hi.data(), ids, hi.size() * 4, cudaMemcpyDeviceToHost));
            for (int t = 0; t < T; ++t) {
                std::vector<std::pair<int32_t, float>> p;
                for (int j = 0; j < kK; ++j) p.push_back({hi[t * kK + j], hw[t * kK + j]});
                std::sort(p.begin(), p.end());
                for (const auto& [i, x] : p) {
                    o.push_back((float)i);
                    o.push_back(x);
                }
            }
            return o;
        };
        bench("route_topk", "E=512 k=10", T, 0.0, [&] { cuda::route_topk_v1(stream, logits, T, kE, kK, ids, w); },
              [&] { cuda::route_topk(stream, logits, T, kE, kK, ids, w); }, out);
        CK(cudaFree(logits));
        CK(cudaFree(ids));
        CK(cudaFree(w));
    }
}

void bench_norms() {
    struct Shape {
        int width, group;
        const char* what;
    };
    for (const Shape sh : {Shape{kH, kH, "2560 (hidden)"}, Shape{kN * kH, kH, "10240 by 2560 (streams)"},
                           Shape{24 * 256, 256, "24 q heads of 256"}, Shape{4 * 128, 128, "4 indexer heads of 128"}}) {
        float* w = upload(randn(sh.width, 0.3f));
        for (int T : {1, 2, 8}) {
            const size_t n = (size_t)T * sh.width;
            float* x = upload(randn(n));
            float* y;
            CK(cudaMalloc(&y, n * sizeof(float)));
            const int wl = sh.group == kH ? sh.width : sh.group;
            bench("rms_norm", sh.what, T, 1e-6,
                  [&] { cuda::rms_norm_v1(stream, x, w, wl, T, sh.width, sh.group, 1e-6f, y); },
                  [&] { cuda::rms_norm(stream, x, w, wl, T, sh.width, sh.group, 1e-6f, y); },
                  [&] { return download(y, n); });
            CK(cudaFree(x));
            CK(cudaFree(y));
        }
        CK(cudaFree(w));
    }
}

void bench_hyper_inject() {
    for (int T : {1, 2, 8}) {
        const size_t nX = (size_t)T * kN * kH;
        const std::vector<float> x0 = randn(nX);
        float* X = upload(x0);
        float* inj = upload(randn((size_t)T * kN));
        float* y = upload(randn((size_t)T * kH));
        // X accumulates: restored before each compared call (the timed calls let it grow, which costs nothing).
        bench("hyper_inject", "n=4 H=2560", T, 1e-6, [&] { cuda::hyper_inject_v1(stream, X, inj, y, T, kN, kH); },
              [&] { cuda::hyper_inject(stream, X, inj, y, T, kN, kH); }, [&] { return download(X, nX); },
              [&] {   // on the timed stream: a pageable cudaMemcpy may return before its copy lands, and the
                      // legacy stream does not order it before this non-blocking stream's next kernel
                  CK(cudaMemcpyAsync(X, x0.data(), nX * sizeof(float), cudaMemcpyHostToDevice, stream));
                  CK(cudaStreamSynchronize(stream));
              });
        CK(cudaFree(X));
        CK(cudaFree(inj));
        CK(cudaFree(y));
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: t1_ops OUT.json [ITERS]\n");
        return 2;
    }
    if (argc > 2) iters = std::atoi(argv[2]);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, %d SMs; %d calls per timing\n", prop.name, prop.multiProcessorCount, iters);
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cuda::upload_iq_tables();
    cuda::hyper_read_upload_tables();
    for (bool with_inj : {true, false}) {
        bench_hyper_read(GgmlType::Q2_0, GgmlType::Q2_0, with_inj);       // the synthetic model
        bench_hyper_read(GgmlType::IQ2_XS, GgmlType::IQ4_NL, with_inj);   // the published IQ2_XS mix (GGUF.md)
        bench_hyper_read(GgmlType::BF16, GgmlType::BF16, with_inj);       // the BF16 layout
    }
    bench_route_topk();
    bench_norms();
    bench_hyper_inject();
    std::FILE* f = std::fopen(argv[1], "w");
    if (!f) {
        std::fprintf(stderr, "t1_ops: cannot write %s\n", argv[1]);
        return 2;
    }
    std::fprintf(f, "{\"device\": \"%s\", \"sms\": %d, \"calls_per_timing\": %d, \"rows\": [%s\n]}\n", prop.name,
                 prop.multiProcessorCount, iters, json.c_str());
    std::fclose(f);
    std::printf("wrote %s; %d rows failed (rel above tol or not repeatable)\n", argv[1], failures);
    return failures ? 1 : 0;
}
