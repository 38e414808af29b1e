// Benchmark (not a test): the hybrid path's CPU expert pool (CpuExpertPool::compute) on the decode shape — one token,
// k missed experts per layer out of synthetic full-size expert tensors (H 2560, I 640), 48 layers back to back —
// next to the streaming ceilings of the same machine (DRAM read, one big gemv_rows). Prints JSON; usage in --help.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#ifdef _WIN32
#include <malloc.h>
#else
#include <time.h>
#endif
#ifdef __linux__
#include <sys/mman.h>
#endif

#include "backend/cpu/thread_pool.h"
#include "experts/cpu_expert_pool.h"
#include "quant/quant.h"

using namespace strata;
using Clock = std::chrono::steady_clock;

namespace {

const char* kUsage =
    "cpu_pool_bench [--workers 1,2,6] [--k 2,3,4,5,6] [--mb 1024] [--layers 48] [--passes 5] [--gap-us 0]\n"
    "               [--format Q2_0] [--tokens 1] [--hidden 2560] [--inter 640] [--hugepages 0]\n"
    "               [--ceilings 1] [--warm 0]\n"
    "  --mb: size of the synthetic expert tensors (more than the caches hold; experts cycle through it)\n"
    "  --gap-us: the caller idles this long between layers (the GPU's share of a hybrid layer)\n"
    "  --hugepages 1: expert tensors on transparent huge pages (Linux), 0: on 4 KB pages\n"
    "  --ceilings 0: skip the DRAM-read and one-call gemv measurements (reported as 0)\n"
    "  --warm 1: during the gap the workers read the layer's experts (one load a cache line) before compute() is\n"
    "            timed: what compute() costs once its bytes sit in the caches (warm_us: the reads' own time)\n";

struct Options {
    std::vector<int> workers = {1, 2};
    std::vector<int> ks = {2, 3, 4, 5, 6};
    int64_t mb = 1024;
    int layers = 48;
    int passes = 5;
    int gap_us = 0;
    std::string format = "Q2_0";
    int tokens = 1;
    int64_t hidden = 2560, inter = 640;
    bool hugepages = false;
    bool ceilings = true;
    bool warm = false;
};

std::vector<int> int_list(const std::string& s) {
    std::vector<int> out;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ',');)
        if (!item.empty()) out.push_back(std::stoi(item));
    return out;
}

const GgmlTypeInfo* type_by_name(const std::string& name) {
    for (uint32_t id = 0; id < 64; ++id) {
        const GgmlTypeInfo* t = ggml_type_info(id);
        if (t && name == t->name) return t;
    }
    return nullptr;
}

std::string cpu_model() {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);)
        if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    return "unknown";
}

// Page-aligned memory; on Linux with or without transparent huge pages (the hybrid path's pinned expert copies come
// from cudaHostAlloc, 4 KB pages as far as we know, hence the default without).
struct PageMemory {
    uint8_t* data = nullptr;
    size_t size = 0;
    PageMemory(size_t bytes, bool huge) : size(bytes) {
        const size_t align = 2u << 20;
#ifdef _WIN32
        data = static_cast<uint8_t*>(_aligned_malloc((bytes + align - 1) / align * align, align));
#else
        data = static_cast<uint8_t*>(std::aligned_alloc(align, (bytes + align - 1) / align * align));
#endif
        if (!data) { std::fprintf(stderr, "cannot allocate %zu bytes\n", bytes); std::exit(1); }
#ifdef __linux__
        madvise(data, (bytes + align - 1) / align * align, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#else
        (void)huge;
#endif
    }
#ifdef _WIN32
    ~PageMemory() { _aligned_free(data); }
#else
    ~PageMemory() { std::free(data); }
#endif
    PageMemory(const PageMemory&) = delete;
    PageMemory& operator=(const PageMemory&) = delete;
};

// A 3-D expert tensor {n, rows, E} of random blocks whose first two bytes (the fp16 scale of Q8_0, Q4_0, IQ4_NL,
// Q2_0 blocks) are a sane small value; filled (first touched) by the pool's threads.
struct ExpertTensor {
    PageMemory bytes;
    Weight w;
    ExpertTensor(const GgmlTypeInfo& info, int64_t n, int64_t rows, int64_t E, bool huge, ThreadPool& pool,
                 uint64_t seed)
        : bytes(ggml_row_bytes(info.type, n) * rows * E, huge) {
        w.type = info.type;
        w.ne[0] = n;
        w.ne[1] = rows;
        w.ne[2] = E;
        w.row_bytes = ggml_row_bytes(info.type, n);
        w.data = bytes.data;
        const int64_t blocks = (int64_t)(bytes.size / info.block_bytes);
        pool.parallel_for(blocks, [&](int64_t b0, int64_t b1) {
            std::mt19937_64 rng(seed * 1000003 + b0);
            for (int64_t b = b0; b < b1; ++b) {
                uint8_t* p = bytes.data + b * info.block_bytes;
                for (int k = 0; k < info.block_bytes; k += 8) {
                    const uint64_t r = rng();
                    std::memcpy(p + k, &r, std::min(8, info.block_bytes - k));
                }
                const uint16_t h = f32_to_fp16(0.01f + 0.001f * (float)(rng() & 15));
                std::memcpy(p, &h, 2);
            }
        });
    }
};

double dram_read_gbs(ThreadPool& pool, const PageMemory& buf, int passes) {
    const size_t words = buf.size / 8;
    const uint64_t* p = (const uint64_t*)buf.data;
    std::vector<uint64_t> sink((size_t)pool.size() * 8);
    double best = 0;
    for (int pass = 0; pass < passes; ++pass) {
        const auto t0 = Clock::now();
        pool.parallel_for(pool.size(), [&](int64_t t, int64_t) {
            const size_t w0 = words * t / pool.size(), w1 = words * (t + 1) / pool.size();
            uint64_t a = 0, b = 0, c = 0, d = 0;
            for (size_t i = w0; i + 4 <= w1; i += 4) { a += p[i]; b += p[i + 1]; c += p[i + 2]; d += p[i + 3]; }
            sink[t * 8] = a ^ b ^ c ^ d;
        });
        best = std::max(best, (double)buf.size / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9);
    }
    return best;
}

// One gemv_rows call per thread over every expert's gate rows: what the kernel streams with no per-layer overhead.
double gemv_stream_gbs(ThreadPool& pool, const Weight& w, const uint8_t* act, int passes) {
    const int64_t rows = w.ne[1] * w.ne[2];
    std::vector<float> y(rows);
    double best = 0;
    for (int pass = 0; pass < passes; ++pass) {
        const auto t0 = Clock::now();
        pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
            gemv_rows(w.type, w.ne[0], w.data, w.row_bytes, r0, r1, act, y.data());
        });
        best = std::max(best, (double)rows * w.row_bytes / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9);
    }
    return best;
}

// CPU time of the calling thread: with one worker, the pool's work without the time this shared machine's other
// processes took the core away. 0 on Windows (not measured there).
double thread_cpu_s() {
#ifdef _WIN32
    return 0;
#else
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
#endif
}

void idle_for(int us) {
    if (us <= 0) return;
    const auto until = Clock::now() + std::chrono::microseconds(us);
    while (Clock::now() < until) std::this_thread::yield();
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; i += 2) {
        const std::string k = argv[i];
        if (k == "--help" || i + 1 >= argc) { std::fputs(kUsage, k == "--help" ? stdout : stderr); return k == "--help" ? 0 : 2; }
        const std::string v = argv[i + 1];
        if (k == "--workers") o.workers = int_list(v);
        else if (k == "--k") o.ks = int_list(v);
        else if (k == "--mb") o.mb = std::stoll(v);
        else if (k == "--layers") o.layers = std::stoi(v);
        else if (k == "--passes") o.passes = std::stoi(v);
        else if (k == "--gap-us") o.gap_us = std::stoi(v);
        else if (k == "--format") o.format = v;
        else if (k == "--tokens") o.tokens = std::stoi(v);
        else if (k == "--hidden") o.hidden = std::stoll(v);
        else if (k == "--inter") o.inter = std::stoll(v);
        else if (k == "--hugepages") o.hugepages = v != "0";
        else if (k == "--ceilings") o.ceilings = v != "0";
        else if (k == "--warm") o.warm = v != "0";
        else { std::fprintf(stderr, "unknown option %s\n%s", k.c_str(), kUsage); return 2; }
    }
    const GgmlTypeInfo* info = type_by_name(o.format);
    if (!info || !quant_supported(info->type)) { std::fprintf(stderr, "bad format %s\n", o.format.c_str()); return 2; }
    const int64_t H = o.hidden, I = o.inter;
    const size_t expert_bytes = ggml_row_bytes(info->type, H) * I * 2 + ggml_row_bytes(info->type, I) * H;
    const int max_k = *std::max_element(o.ks.begin(), o.ks.end());
    const int64_t E = std::max<int64_t>(max_k, (o.mb << 20) / (int64_t)expert_bytes);
    const int max_workers = *std::max_element(o.workers.begin(), o.workers.end());

    ThreadPool fill_pool(std::max(max_workers, (int)std::thread::hardware_concurrency()));
    ExpertTensor gate(*info, H, I, E, o.hugepages, fill_pool, 1), up(*info, H, I, E, o.hugepages, fill_pool, 2),
        down(*info, I, H, E, o.hugepages, fill_pool, 3);

    // Per layer: x for the tokens; the experts of consecutive layers walk a random permutation of all E experts, so
    // an expert comes back only after E / k layers (long out of the caches).
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> xs((size_t)o.layers * o.tokens * H);
    for (float& v : xs) v = nd(rng);
    std::vector<int> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);

    std::printf("{\n  \"cpu\": \"%s\",\n  \"hardware_threads\": %u,\n  \"isa\": \"%s\",\n  \"avx512_vnni\": %s,\n",
                cpu_model().c_str(), std::thread::hardware_concurrency(), isa_name(active_isa()),
                active_isa() == Isa::avx512 && avx512_vnni_active() ? "true" : "false");
    std::printf("  \"format\": \"%s\",\n  \"hidden\": %lld,\n  \"inter\": %lld,\n  \"expert_bytes\": %zu,\n"
                "  \"experts_in_blob\": %lld,\n  \"blob_mb\": %.0f,\n  \"layers\": %d,\n  \"passes\": %d,\n"
                "  \"tokens\": %d,\n  \"gap_us\": %d,\n  \"hugepages\": %s,\n  \"runs\": [\n",
                info->name, (long long)H, (long long)I, expert_bytes, (long long)E, expert_bytes * E / 1048576.0,
                o.layers, o.passes, o.tokens, o.gap_us, o.hugepages ? "true" : "false");

    std::vector<uint8_t> act(act_bytes(info->type, H));
    quantize_act(info->type, xs.data(), act.data(), H);
    bool first = true;
    size_t cursor = 0;
    for (int workers : o.workers) {
        ThreadPool ceiling_pool(workers);
        const double dram = o.ceilings ? dram_read_gbs(ceiling_pool, gate.bytes, 2) : 0;
        const double stream = o.ceilings ? gemv_stream_gbs(ceiling_pool, gate.w, act.data(), 2) : 0;
        CpuExpertPool pool(workers, false);
        for (int k : o.ks) {
            std::vector<float> out((size_t)o.tokens * k * H);
            std::vector<ExpertPair> pairs;
            std::vector<double> layer_us;
            double total_s = 0, caller_cpu_s = 0, warm_s = 0, phase0[3];
            std::vector<int> layer_experts;
            for (int pass = 0; pass < o.passes + 1; ++pass) {   // pass 0 warms the pool and its buffers
                if (pass == 1) std::copy(pool.phase_seconds(), pool.phase_seconds() + 3, phase0);
                double pass_s = 0;
                for (int l = 0; l < o.layers; ++l) {
                    pairs.clear();
                    for (int t = 0; t < o.tokens; ++t)
                        for (int j = 0; j < k; ++j) pairs.push_back({t, order[(cursor + j) % E]});
                    cursor += k;
                    const auto w0 = Clock::now();
                    if (o.warm) {
                        layer_experts.clear();
                        for (int j = 0; j < k; ++j) layer_experts.push_back(pairs[j].expert);
                        pool.warm(gate.w, up.w, down.w, layer_experts);
                    }
                    const double warm_took = std::chrono::duration<double>(Clock::now() - w0).count();
                    if (pass > 0) warm_s += warm_took;
                    idle_for(o.gap_us - (int)(warm_took * 1e6));
                    const auto t0 = Clock::now();
                    const double c0 = thread_cpu_s();
                    pool.compute(gate.w, up.w, down.w, xs.data() + (size_t)l * o.tokens * H, pairs, out.data());
                    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
                    if (pass > 0) caller_cpu_s += thread_cpu_s() - c0;
                    pass_s += s;
                    if (pass > 0) layer_us.push_back(s * 1e6);
                }
                if (pass > 0) total_s += pass_s;
            }
            std::sort(layer_us.begin(), layer_us.end());
            const double bytes = (double)expert_bytes * k * o.layers * o.passes;
            const auto pct = [&](double q) { return layer_us[(size_t)(q * (layer_us.size() - 1))]; };
            const auto phase_us = [&](int p) { return (pool.phase_seconds()[p] - phase0[p]) * 1e6 / (o.layers * o.passes); };
            std::printf("%s    {\"workers\": %d, \"k\": %d, \"gbs\": %.2f, \"us_per_layer_mean\": %.1f, "
                        "\"us_per_layer_median\": %.1f, \"us_per_layer_p90\": %.1f, \"us_per_layer_min\": %.1f, "
                        "\"gbs_at_median\": %.2f, \"caller_cpu_us_per_layer\": %.1f, "
                        "\"mb_per_layer\": %.2f, \"dram_read_gbs\": %.2f, \"gemv_stream_gbs\": %.2f, "
                        "\"warm_us_per_layer\": %.1f, "
                        "\"phase_us_per_layer\": {\"quantize_x\": %.1f, \"gate_up\": %.1f, \"down\": %.1f}}",
                        first ? "" : ",\n", workers, k, bytes / total_s / 1e9, total_s * 1e6 / (o.layers * o.passes),
                        pct(0.5), pct(0.9), layer_us.front(), expert_bytes * k / pct(0.5) / 1e3,
                        caller_cpu_s * 1e6 / (o.layers * o.passes), expert_bytes * k / 1e6, dram, stream,
                        warm_s * 1e6 / (o.layers * o.passes), phase_us(0), phase_us(1), phase_us(2));
            std::fflush(stdout);
            first = false;
        }
    }
    std::printf("\n  ]\n}\n");
    return 0;
}
