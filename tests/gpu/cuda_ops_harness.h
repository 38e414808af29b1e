// cuda_ops_test's harness: the two backends under test, random inputs and weights, device copies, the
// CPU-vs-CUDA comparison and the result list that main() prints and writes. Included by cuda_ops_test.cpp only.
#pragma once
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "gpu_test_util.h"
#include "random_blocks.h"

namespace strata::opstest {

using gputest::rel_err;

inline std::mt19937 rng(12345);
inline CpuBackend* cpu = nullptr;
inline CudaBackend* gpu = nullptr;
inline std::string mode;   // name suffix of the activation mode under test
inline std::string only;   // --only GROUP: run only the test groups whose name contains GROUP

// Runs a test group unless --only names another.
inline void group(const char* name, void (*fn)()) {
    if (only.empty() || std::string(name).find(only) != std::string::npos) fn();
}

struct Result {
    std::string name;
    double rel;
    double tol;
};
inline std::vector<Result> results;

inline std::vector<float> randn(size_t n, float sd = 1.0f) { return gputest::randn(rng, n, sd); }

inline void report(const std::string& name, const std::vector<float>& got, const std::vector<float>& want, double tol) {
    const double r = rel_err(got, want);
    results.push_back({name, r, tol});
    std::printf("%-44s rel %.3e  %s\n", name.c_str(), r, r <= tol ? "ok" : "FAIL");
}

// A check that two outputs are the same bits (reported as 0 when they are, 1 when not; tolerance 0).
inline void report_same_bits(const std::string& name, const std::vector<float>& got, const std::vector<float>& want) {
    const bool same =
        got.size() == want.size() && std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0;
    report(name, {same ? 0.0f : 1.0f}, {0.0f}, 0.0);
}

// Device copies of host arrays on the GPU backend.
struct Dev {
    float* p;
    size_t n;
    explicit Dev(const std::vector<float>& h) : p(gpu->alloc(h.size())), n(h.size()) { gpu->to_device(p, h.data(), n); }
    explicit Dev(size_t count) : p(gpu->alloc(count)), n(count) { gpu->fill(p, 0.0f, n); }
    ~Dev() { gpu->release(p); }
    std::vector<float> get() const {
        std::vector<float> h(n);
        gpu->to_host(h.data(), p, n);
        return h;
    }
    operator float*() const { return p; }
};

// int32 values in float-sized slots, as a backend's memory holds ids and positions (Dev uploads them as they are).
inline std::vector<float> int_bits(const std::vector<int32_t>& v) {
    static_assert(sizeof(float) == sizeof(int32_t), "int32 values travel in float slots");
    std::vector<float> bits(v.size());
    std::memcpy(bits.data(), v.data(), v.size() * sizeof(int32_t));
    return bits;
}
inline const int32_t* as_ints(const float* p) { return reinterpret_cast<const int32_t*>(p); }

// A weight in host memory with a GgufTensor to name it; kept alive for the whole run (the GPU map keys on data).
struct HostWeight {
    GgufTensor tensor;
    std::vector<uint8_t> bytes;
    Weight w;
};
inline std::deque<HostWeight> weights;

// upload false: the caller uploads it (CudaBackend::upload_together).
inline const Weight& make_weight(GgmlType t, int64_t ne0, int64_t ne1, int64_t ne2 = 1, const std::string& name = "w",
                          bool upload = true) {
    HostWeight& h = weights.emplace_back();
    h.bytes = gputest::random_rows(t, ne1 * ne2, ne0, rng);
    h.tensor.name = name + "." + ggml_type_name(t);
    h.tensor.type = t;
    h.tensor.n_dims = ne2 > 1 ? 3 : 2;
    h.tensor.ne[0] = ne0;
    h.tensor.ne[1] = ne1;
    h.tensor.ne[2] = ne2;
    h.tensor.n_bytes = h.bytes.size();
    h.w.tensor = &h.tensor;
    h.w.type = t;
    h.w.ne[0] = ne0;
    h.w.ne[1] = ne1;
    h.w.ne[2] = ne2;
    h.w.data = h.bytes.data();
    h.w.row_bytes = ggml_row_bytes(t, ne0);
    if (upload) gpu->upload_weight(h.w);
    return h.w;
}

inline const Weight& make_f32_vector(const std::vector<float>& v, const std::string& name) {
    HostWeight& h = weights.emplace_back();
    h.bytes.resize(v.size() * 4);
    std::memcpy(h.bytes.data(), v.data(), h.bytes.size());
    h.tensor.name = name;
    h.tensor.n_dims = 1;
    h.tensor.ne[0] = (int64_t)v.size();
    h.tensor.n_bytes = h.bytes.size();
    h.w.tensor = &h.tensor;
    h.w.ne[0] = (int64_t)v.size();
    h.w.data = h.bytes.data();
    h.w.row_bytes = h.bytes.size();
    gpu->upload_weight(h.w);
    return h.w;
}

// Runs op on both backends with the same inputs (vectors uploaded for the GPU) and compares the listed outputs; those
// of same_bits must also be the same bytes (e.g. fp16 pairs held in float slots).
inline void compare(const std::string& name, std::vector<std::vector<float>> inputs, const std::vector<int>& outputs,
             const std::function<void(Backend&, std::vector<float*>&)>& op, double tol,
             const std::vector<int>& same_bits = {}) {
    std::vector<std::vector<float>> host = inputs;
    std::vector<float*> hp;
    for (auto& v : host) hp.push_back(v.data());
    op(*cpu, hp);
    std::deque<Dev> dev;
    std::vector<float*> dp;
    for (auto& v : inputs) dp.push_back(dev.emplace_back(v).p);
    op(*gpu, dp);
    for (int o : outputs)
        report(name + (outputs.size() > 1 ? " [" + std::to_string(o) + "]" : ""), dev[o].get(), host[o], tol);
    for (int o : same_bits) report_same_bits(name + " bits [" + std::to_string(o) + "]", dev[o].get(), host[o]);
}

// An MoE layer's routed experts (E gate and up matrices of type t, I rows of H; E down ones of down_t, H rows of I),
// or with E = 0 its shared expert (one of each, Is = I), drawn in the order gate, up, down; names prefix + their role.
inline void set_experts(MoeWeights& m, GgmlType t, GgmlType down_t, int H, int I, int E, const std::string& prefix = "") {
    const bool shared = E == 0;
    const std::string sfx = shared ? "_shexp" : "_exps";
    (shared ? m.gate_shexp : m.gate_exps) = make_weight(t, H, I, shared ? 1 : E, prefix + "gate" + sfx);
    (shared ? m.up_shexp : m.up_exps) = make_weight(t, H, I, shared ? 1 : E, prefix + "up" + sfx);
    (shared ? m.down_shexp : m.down_exps) = make_weight(down_t, I, H, shared ? 1 : E, prefix + "down" + sfx);
}

}  // namespace strata::opstest
