// Benchmark (not a test): GB/s of gemv_rows over expert-sized weight blobs (640 rows x 2560) streaming through
// many experts (more than the caches hold), with 1..N threads split by rows, next to this machine's DRAM read
// bandwidth measured in the same run. Prints JSON. Usage: quant_dot_bench [--threads 1,2,6] [--mb 2048]
// [--formats IQ2_XS,IQ3_XXS,Q2_0,Q4_K,IQ4_NL,Q6_K,Q5_K,Q3_K,Q2_K] [--isa best|avx2|avx512|scalar] [--passes 3]
// [--acts 1] [--vnni 1]. --acts N > 1 runs gemv_rows_multi with N activation rows (weights read once for all N);
// --vnni 0 runs the plain AVX-512 kernels on a CPU that has AVX512-VNNI.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include "quant/quant.h"

using namespace strata;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kCols = 2560, kRows = 640;  // one expert's gate/up matrix: 640 rows of 2560 weights

struct Options {
    std::vector<int> threads = {1, 2, 6};
    int64_t mb = 2048;
    std::vector<std::string> formats = {"IQ2_XS", "IQ3_XXS", "Q2_0", "Q4_K", "IQ4_NL", "Q6_K", "Q5_K", "Q3_K", "Q2_K"};
    std::string isa = "best";
    int passes = 3;
    int acts = 1;
};

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ',');) if (!item.empty()) out.push_back(item);
    return out;
}

const GgmlTypeInfo* type_by_name(const std::string& name) {
    for (uint32_t id = 0; id < 64; ++id) {
        const GgmlTypeInfo* t = ggml_type_info(id);
        if (t && name == t->name) return t;
    }
    return nullptr;
}

// fp16 scale positions, so the blob holds sane finite scales (random bytes could make NaN/inf/denormal scales).
std::vector<int> scale_offsets(GgmlType t) {
    switch (t) {
    case GgmlType::Q4_K: case GgmlType::Q5_K: return {0, 2};
    case GgmlType::Q2_K: return {80, 82};
    case GgmlType::Q3_K: return {108};
    case GgmlType::Q6_K: return {208};
    default: return {0};
    }
}

template <typename F>
void run_threads(int n, F&& body) {
    std::vector<std::thread> ts;
    for (int t = 0; t < n; ++t) ts.emplace_back(body, t);
    for (auto& t : ts) t.join();
}

void fill_blob(std::vector<uint8_t>& blob, const GgmlTypeInfo& info, int threads) {
    const size_t nblocks = blob.size() / info.block_bytes;
    const auto offs = scale_offsets(info.type);
    run_threads(threads, [&](int t) {
        std::mt19937_64 rng(1000 + t);
        size_t b0 = nblocks * t / threads, b1 = nblocks * (t + 1) / threads;
        for (size_t b = b0; b < b1; ++b) {
            uint8_t* p = blob.data() + b * info.block_bytes;
            for (int k = 0; k + 8 <= info.block_bytes; k += 8) { uint64_t r = rng(); std::memcpy(p + k, &r, 8); }
            for (int k = info.block_bytes & ~7; k < info.block_bytes; ++k) p[k] = (uint8_t)rng();
            for (int off : offs) { uint16_t h = f32_to_fp16(0.01f + 0.001f * (float)(rng() & 15)); std::memcpy(p + off, &h, 2); }
        }
    });
}

double dram_read_gbs(const std::vector<uint8_t>& buf, int threads, int passes) {
    const size_t words = buf.size() / 8;
    const uint64_t* p = (const uint64_t*)buf.data();
    double best = 0;
    std::vector<uint64_t> sink(threads * 8);
    for (int pass = 0; pass < passes; ++pass) {
        auto t0 = Clock::now();
        run_threads(threads, [&](int t) {
            size_t w0 = words * t / threads, w1 = words * (t + 1) / threads;
            uint64_t a = 0, b = 0, c = 0, d = 0;
            for (size_t i = w0; i + 4 <= w1; i += 4) { a += p[i]; b += p[i + 1]; c += p[i + 2]; d += p[i + 3]; }
            sink[t * 8] = a ^ b ^ c ^ d;
        });
        double s = std::chrono::duration<double>(Clock::now() - t0).count();
        best = std::max(best, (double)buf.size() / s / 1e9);
    }
    return best;
}

std::string cpu_model() {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);)
        if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    return "unknown";
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string k = argv[i], v = argv[i + 1];
        if (k == "--threads") { o.threads.clear(); for (auto& s : split(v)) o.threads.push_back(std::stoi(s)); }
        else if (k == "--mb") o.mb = std::stoll(v);
        else if (k == "--formats") o.formats = split(v);
        else if (k == "--isa") o.isa = v;
        else if (k == "--passes") o.passes = std::stoi(v);
        else if (k == "--acts") o.acts = std::max(1, std::stoi(v));
        else if (k == "--vnni") set_avx512_vnni(v != "0");
        else { std::fprintf(stderr, "unknown option %s\n", k.c_str()); return 2; }
    }
    Isa isa = cpu_best_isa();
    if (o.isa == "scalar") isa = Isa::scalar;
    else if (o.isa == "avx2") isa = Isa::avx2;
    else if (o.isa == "avx512") isa = Isa::avx512;
    set_active_isa(isa);
    isa = active_isa();
    const int max_threads = *std::max_element(o.threads.begin(), o.threads.end());

    std::vector<float> x(kCols);
    std::mt19937 rng(5);
    for (auto& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);

    std::printf("{\n  \"cpu\": \"%s\",\n  \"hardware_threads\": %u,\n  \"isa\": \"%s\",\n  \"avx512_vnni\": %s,\n",
                cpu_model().c_str(), std::thread::hardware_concurrency(), isa_name(isa),
                isa == Isa::avx512 && avx512_vnni_active() ? "true" : "false");
    std::printf("  \"expert_shape\": [%lld, %lld],\n  \"blob_mb\": %lld,\n  \"passes\": %d,\n  \"acts\": %d,\n",
                (long long)kRows, (long long)kCols, (long long)o.mb, o.passes, o.acts);

    std::vector<uint8_t> blob;
    std::string dram_json, results_json;
    for (size_t f = 0; f < o.formats.size(); ++f) {
        const GgmlTypeInfo* info = type_by_name(o.formats[f]);
        if (!info || !quant_supported(info->type)) { std::fprintf(stderr, "bad format %s\n", o.formats[f].c_str()); return 2; }
        const size_t row_bytes = ggml_row_bytes(info->type, kCols);
        const size_t expert_bytes = row_bytes * kRows;
        const int64_t experts = std::max<int64_t>(1, (o.mb << 20) / (int64_t)expert_bytes);
        blob.assign(expert_bytes * experts, 0);
        fill_blob(blob, *info, max_threads);
        if (f == 0) {  // DRAM read bandwidth over the same buffer size, before any kernel run
            for (size_t t = 0; t < o.threads.size(); ++t) {
                char buf[64];
                std::snprintf(buf, sizeof buf, "%s\"%d\": %.2f", t ? ", " : "", o.threads[t],
                              dram_read_gbs(blob, o.threads[t], o.passes));
                dram_json += buf;
            }
        }
        const size_t ab = act_bytes(info->type, kCols);
        std::vector<uint8_t> act(ab * o.acts);
        for (int t = 0; t < o.acts; ++t) quantize_act(info->type, x.data(), act.data() + ab * t, kCols);
        std::vector<float> y((size_t)kRows * experts * o.acts);
        for (int threads : o.threads) {
            double best = 0;
            for (int pass = 0; pass < o.passes; ++pass) {
                auto t0 = Clock::now();
                run_threads(threads, [&](int t) {
                    int64_t r0 = kRows * t / threads, r1 = kRows * (t + 1) / threads;
                    for (int64_t e = 0; e < experts; ++e) {
                        const uint8_t* m = blob.data() + e * expert_bytes;
                        if (o.acts == 1)
                            gemv_rows(info->type, kCols, m, row_bytes, r0, r1, act.data(), y.data() + e * kRows);
                        else
                            gemv_rows_multi(info->type, kCols, m, row_bytes, r0, r1, act.data(), o.acts, ab,
                                            y.data() + e * kRows, (size_t)kRows * experts);
                    }
                });
                double s = std::chrono::duration<double>(Clock::now() - t0).count();
                best = std::max(best, (double)blob.size() / s / 1e9);
            }
            char buf[256];
            std::snprintf(buf, sizeof buf, "%s    {\"format\": \"%s\", \"threads\": %d, \"gbs\": %.2f, \"gweights_per_s\": %.2f}",
                          results_json.empty() ? "" : ",\n", info->name, threads, best,
                          best / (double)row_bytes * (double)kCols);
            results_json += buf;
        }
    }
    std::printf("  \"dram_read_gbs\": {%s},\n  \"gemv\": [\n%s\n  ]\n}\n", dram_json.c_str(), results_json.c_str());
    return 0;
}
