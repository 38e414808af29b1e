// Benchmark (needs a GPU): how fast the decode experts (cuda::moe_decode over matrix tables, as the hybrid device
// join calls it) read missed experts zero-copy from pinned host memory, next to the same call from HBM and to a plain
// read of the same bytes over PCIe. Full-size Q2_0 experts (H 2560, I 640, 1.38 MB each), T = 1, top-10; every call
// takes 10 distinct experts at random out of 256 (354 MB, past the L2), so each call reads its experts afresh.
//   hbm        all 10 pairs from device memory
//   zc10       all 10 zero-copy            zc3       3 zero-copy + 7 from HBM (a decode layer at ~60% hits, share ~0.75)
//   read10     a plain 16-byte-load kernel over the 10 experts' bytes in host memory (the PCIe ceiling of a kernel)
//   pf+zc10    read10's kernel as an L2 prefetch (prefetch.global.L2), then zc10's call
// Prints JSON lines: us per call, zero-copy GB/s. usage: zero_copy_speed [--calls 200]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/kernels/moe_gate_up.h"
#include "gpu_test_util.h"
#include "random_blocks.h"

using namespace strata;

namespace {

constexpr int kH = 2560, kI = 640, kExperts = 256, kK = 10;

struct Span {
    const uint8_t* p;
    size_t bytes;
};

// Sums 16-byte loads of every span (grid-stride per span), so nothing is optimised away. prefetch: L2 prefetches
// instead of loads.
__global__ void read_spans(const Span* spans, int n, bool prefetch, unsigned* sink) {
    unsigned acc = 0;
    for (int s = 0; s < n; ++s) {
        const uint4* p = reinterpret_cast<const uint4*>(spans[s].p);
        const size_t n16 = spans[s].bytes / 16;
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x) {
            if (prefetch) {
                if ((i & 7) == 0) asm volatile("prefetch.global.L2 [%0];" ::"l"(p + i));
            } else {
                const uint4 v = __ldcs(p + i);
                acc += v.x ^ v.y ^ v.z ^ v.w;
            }
        }
    }
    if (acc == 0x12345678u) *sink = acc;
}

}  // namespace

int main(int argc, char** argv) {
    int calls = 200;
    for (int i = 1; i + 1 < argc; ++i)
        if (std::strcmp(argv[i], "--calls") == 0) calls = std::atoi(argv[i + 1]);
    try {
        cuda::upload_iq_tables();
        std::mt19937 rng(5);
        const GgmlType t = GgmlType::Q2_0;
        const size_t rb_gu = ggml_row_bytes(t, kH), rb_d = ggml_row_bytes(t, kI);
        const size_t gate_bytes = rb_gu * kI, down_bytes = rb_d * kH;
        const size_t expert_bytes = 2 * gate_bytes + down_bytes;
        // One random expert, copied into every slot of the host and device tensors (its bits do not matter here).
        const std::vector<uint8_t> g = gputest::random_rows(t, kI, kH, rng), u = gputest::random_rows(t, kI, kH, rng),
                                   d = gputest::random_rows(t, kH, kI, rng);
        uint8_t* host = nullptr;
        CUDA_CHECK(cudaHostAlloc(&host, expert_bytes * kExperts, cudaHostAllocMapped));
        for (int e = 0; e < kExperts; ++e) {
            uint8_t* x = host + expert_bytes * e;
            std::memcpy(x, g.data(), gate_bytes);
            std::memcpy(x + gate_bytes, u.data(), gate_bytes);
            std::memcpy(x + 2 * gate_bytes, d.data(), down_bytes);
        }
        uint8_t* host_dev = nullptr;
        CUDA_CHECK(cudaHostGetDevicePointer((void**)&host_dev, host, 0));
        uint8_t* dev = nullptr;
        CUDA_CHECK(cudaMalloc(&dev, expert_bytes * kExperts));
        CUDA_CHECK(cudaMemcpy(dev, host, expert_bytes * kExperts, cudaMemcpyHostToDevice));

        cudaStream_t s;
        CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        float* dx = gputest::to_device(gputest::randn(rng, kH));
        float* dw = gputest::to_device(std::vector<float>(kK, 0.1f));
        float* dy = gputest::to_device(std::vector<float>(kH));
        const int blk = cuda::act_block(t);
        cuda::ActQ8 act{gputest::to_device(std::vector<int8_t>(kH)), gputest::to_device(std::vector<float>(kH / blk))};
        cuda::quantize_act(s, blk, dx, 1, kH, act);
        const size_t scratch_bytes = cuda::moe_decode_scratch_bytes(kK, kI);
        void* scratch = nullptr;
        CUDA_CHECK(cudaMalloc(&scratch, scratch_bytes));
        unsigned* sink = gputest::to_device(std::vector<unsigned>(1));

        // Per call: tables [3][calls][kK] and read spans [calls][kK·3] on the device, made up front.
        struct Variant {
            std::string name;
            int zc;          // pairs read zero-copy (the first zc of the call)
            int mode;        // 0 moe_decode, 1 read only, 2 prefetch + moe_decode
        };
        const Variant variants[] = {{"hbm", 0, 0}, {"zc10", 10, 0}, {"zc3", 3, 0}, {"read10", 10, 1},
                                    {"pf+zc10", 10, 2}, {"hbm", 0, 0}, {"zc10", 10, 0}};
        for (const Variant& v : variants) {
            std::vector<const uint8_t*> tg((size_t)calls * kK), tu(tg.size()), td(tg.size());
            std::vector<Span> spans((size_t)calls * kK * 3);
            for (int c = 0; c < calls; ++c) {
                std::vector<int> pick(kExperts);
                for (int e = 0; e < kExperts; ++e) pick[e] = e;
                std::shuffle(pick.begin(), pick.end(), rng);
                for (int j = 0; j < kK; ++j) {
                    const uint8_t* base = (j < v.zc ? host_dev : dev) + expert_bytes * pick[j];
                    const size_t i = (size_t)c * kK + j;
                    tg[i] = base;
                    tu[i] = base + gate_bytes;
                    td[i] = base + 2 * gate_bytes;
                    spans[i * 3 + 0] = {base, gate_bytes};
                    spans[i * 3 + 1] = {base + gate_bytes, gate_bytes};
                    spans[i * 3 + 2] = {base + 2 * gate_bytes, down_bytes};
                }
            }
            const uint8_t** d_tg = gputest::to_device(tg);
            const uint8_t** d_tu = gputest::to_device(tu);
            const uint8_t** d_td = gputest::to_device(td);
            Span* d_spans = gputest::to_device(spans);
            auto call = [&](int c) {
                cuda::MatmulArgs mg, mu, md;
                mg.type = mu.type = md.type = t;
                mg.row_bytes = mu.row_bytes = rb_gu;
                md.row_bytes = rb_d;
                mg.rows = mu.rows = kI;
                md.rows = kH;
                mg.n = mu.n = kH;
                md.n = kI;
                mg.act_div = mu.act_div = kK;
                mg.mats = d_tg + (size_t)c * kK;
                mu.mats = d_tu + (size_t)c * kK;
                md.mats = d_td + (size_t)c * kK;
                if (v.mode >= 1) {
                    read_spans<<<264, 512, 0, s>>>(d_spans + (size_t)c * kK * 3, 3 * v.zc, v.mode == 2, sink);
                    CUDA_CHECK_LAUNCH();
                }
                if (v.mode != 1) cuda::moe_decode(s, mg, mu, md, act, dx, dw, 1, kK, scratch, scratch_bytes, dy);
            };
            for (int c = 0; c < 5; ++c) call(c);   // warm-up (the timed calls take fresh experts)
            cudaEvent_t e0, e1;
            CUDA_CHECK(cudaEventCreate(&e0));
            CUDA_CHECK(cudaEventCreate(&e1));
            CUDA_CHECK(cudaEventRecord(e0, s));
            for (int c = 0; c < calls; ++c) call(c);
            CUDA_CHECK(cudaEventRecord(e1, s));
            CUDA_CHECK(cudaEventSynchronize(e1));
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            const double us = 1000.0 * ms / calls;
            const double zc_bytes = (double)v.zc * expert_bytes;
            std::printf("{\"variant\": \"%s\", \"us_per_call\": %.2f, \"zero_copy_mb\": %.2f, \"zero_copy_gb_s\": %.1f}\n",
                        v.name.c_str(), us, zc_bytes / 1e6, v.zc ? zc_bytes / (us * 1e3) : 0.0);
            std::fflush(stdout);
            for (void* p : {(void*)d_tg, (void*)d_tu, (void*)d_td, (void*)d_spans}) cudaFree(p);
        }
        CUDA_CHECK(cudaDeviceSynchronize());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "zero_copy_speed: error: %s\n", e.what());
        return 2;
    }
    return 0;
}
