// What one step between dependent phases of GPU work costs, the question behind a persistent decode kernel (issue
// #7): a decode pass is ~1,000 short dependent kernels. Each phase here is one grid of G blocks × 256 threads in
// which block b reads word b of the previous phase's output and writes word (b + 1) % G of its own (ping-pong
// buffers), after optionally streaming W KiB of a 1 GiB buffer (the phase's "weights"). Five ways to run N phases:
//   graph        N ordinary kernel launches captured in one CUDA graph (what a decode pass is today)
//   pdl0-2       the same with programmatic dependent launch: each kernel may start while the one before finishes
//                and waits (griddepcontrol.wait) before reading the previous output; it lets the next one launch
//                (griddepcontrol.launch_dependents) after its weights (0), at its start (1) or at its end (2)
//   persistent   one cooperative kernel of G blocks looping over the N phases with a grid barrier between them
//                (an arrival counter and a generation word, acquire / release), the shape of a persistent kernel
// µs per phase = (time of the N phases) / N, over 10 timed runs after 3 warm-ups (CUDA events); the final words are
// checked (each is N when the phases ran in order). usage: kernel_boundary [N=1000]
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/common.cuh"

namespace {

constexpr int kThreads = 256;
constexpr size_t kWeightBytes = size_t(1) << 30;

// Block b's share of phase p's weights: `work` bytes of w (16-byte loads, the block's threads side by side), folded
// into one word so the loads are kept.
__device__ __forceinline__ unsigned read_weights(const uint4* w, size_t work, int p) {
    unsigned acc = 0;
    if (work) {
        const size_t n16 = work / 16, base = ((size_t)p * gridDim.x + blockIdx.x) * n16 % (kWeightBytes / 16 - n16);
        for (size_t i = threadIdx.x; i < n16; i += kThreads) {
            const uint4 v = __ldcs(w + base + i);
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
        }
    }
    return acc;
}

// The phase's step for block b after its weights: out[(b + 1) % G] = in[b] + 1; the folded weights only decide an
// impossible store.
__device__ __forceinline__ void step(const float* in, float* out, unsigned acc) {
    const int b = blockIdx.x, G = gridDim.x;
    if (threadIdx.x == 0) {
        const float v = __ldcg(in + b);
        __stcg(out + (b + 1) % G, v + 1.0f);
    }
    if (acc == 0x9e3779b9u) out[G] = 0.0f;
}

__device__ __forceinline__ void phase(const float* in, float* out, const uint4* w, size_t work, int p) {
    step(in, out, read_weights(w, work, p));
}

__global__ void __launch_bounds__(kThreads) phase_kernel(const float* in, float* out, const uint4* w, size_t work, int p) {
    phase(in, out, w, work, p);
}

// PDL variants (ORDER): 0 = the weights read before griddepcontrol.wait, the next kernel let launch after them;
// 1 = wait, let the next launch, then the weights (a kernel whose inputs all come from the previous one);
// 2 = wait, the weights and the output, let the next launch last.
template <int ORDER>
__global__ void __launch_bounds__(kThreads) phase_pdl_kernel(const float* in, float* out, const uint4* w, size_t work,
                                                             int p) {
    if (ORDER >= 1) asm volatile("griddepcontrol.wait;" ::: "memory");
    if (ORDER == 1) asm volatile("griddepcontrol.launch_dependents;");
    const unsigned acc = read_weights(w, work, p);
    if (ORDER == 0) {
        asm volatile("griddepcontrol.launch_dependents;");
        asm volatile("griddepcontrol.wait;" ::: "memory");
    }
    step(in, out, acc);
    if (ORDER == 2) asm volatile("griddepcontrol.launch_dependents;");
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// Grid barrier: every block's thread 0 arrives (release), the last one resets the count and moves the generation;
// the others wait for the generation to move (acquire). bar[0] count, bar[1] generation.
__device__ __forceinline__ void grid_barrier(unsigned* bar) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned gen = ld_acquire(bar + 1);
        __threadfence();
        if (atomicAdd(bar, 1u) == gridDim.x - 1) {
            bar[0] = 0;
            __threadfence();
            atomicAdd(bar + 1, 1u);
        } else {
            while (ld_acquire(bar + 1) == gen) {
            }
        }
    }
    __syncthreads();
}

__global__ void __launch_bounds__(kThreads) persistent_kernel(float* a, float* b, const uint4* w, size_t work, int n,
                                                              unsigned* bar) {
    for (int p = 0; p < n; ++p) {
        phase(p % 2 ? b : a, p % 2 ? a : b, w, work, p);
        grid_barrier(bar);
    }
}

struct Buffers {
    float* a;
    float* b;
    uint4* w;
    unsigned* bar;
    int G;
    // On the stream the phases run on (a non-blocking stream does not wait for the legacy default stream).
    void reset(cudaStream_t s) const {
        CUDA_CHECK(cudaMemsetAsync(a, 0, (G + 1) * sizeof(float), s));
        CUDA_CHECK(cudaMemsetAsync(b, 0, (G + 1) * sizeof(float), s));
        CUDA_CHECK(cudaMemsetAsync(bar, 0, 2 * sizeof(unsigned), s));
    }
    // After n phases the last output (a when n is even) holds n everywhere.
    bool check(int n) const {
        std::vector<float> h(G);
        CUDA_CHECK(cudaMemcpy(h.data(), n % 2 ? b : a, G * sizeof(float), cudaMemcpyDeviceToHost));
        for (float v : h)
            if (v != (float)n) return false;
        return true;
    }
};

// pdl: -1 ordinary launches, else phase_pdl_kernel<pdl> as programmatic dependents.
cudaGraphExec_t capture(const Buffers& B, int n, size_t work, int pdl, cudaStream_t s) {
    cudaGraph_t g;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int p = 0; p < n; ++p) {
        float* in = p % 2 ? B.b : B.a;
        float* out = p % 2 ? B.a : B.b;
        void (*kernel)(const float*, float*, const uint4*, size_t, int) =
            pdl < 0 ? phase_kernel : pdl == 0 ? phase_pdl_kernel<0> : pdl == 1 ? phase_pdl_kernel<1> : phase_pdl_kernel<2>;
        strata::cuda::launch_kernel(kernel, dim3(B.G), kThreads, 0, s, pdl >= 0, (const float*)in, out,
                                    (const uint4*)B.w, work, p);
        CUDA_CHECK(cudaGetLastError());
    }
    CUDA_CHECK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t e;
    CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
    CUDA_CHECK(cudaGraphDestroy(g));
    return e;
}

// Mean µs per phase of `run` (which runs n phases) over 10 timed runs after 3 warm-ups; ok: the words after a run.
template <class Run>
double time_phases(const Buffers& B, int n, cudaStream_t s, Run run, bool& ok) {
    cudaEvent_t t0, t1;
    CUDA_CHECK(cudaEventCreate(&t0));
    CUDA_CHECK(cudaEventCreate(&t1));
    ok = true;
    double total_ms = 0;
    for (int it = 0; it < 13; ++it) {
        B.reset(s);
        CUDA_CHECK(cudaStreamSynchronize(s));
        CUDA_CHECK(cudaEventRecord(t0, s));
        run();
        CUDA_CHECK(cudaEventRecord(t1, s));
        CUDA_CHECK(cudaEventSynchronize(t1));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
        if (it >= 3) total_ms += ms;
        ok = ok && B.check(n);
    }
    CUDA_CHECK(cudaEventDestroy(t0));
    CUDA_CHECK(cudaEventDestroy(t1));
    return total_ms / 10 * 1e3 / n;
}

}  // namespace

int run(int n);

int main(int argc, char** argv) {
    try {
        return run(argc > 1 ? std::atoi(argv[1]) : 1000);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kernel_boundary: %s\n", e.what());
        return 2;
    }
}

int run(int n) {
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_kernel, kThreads, 0));
    std::printf("device %s, %d SMs, %d persistent blocks an SM; %d phases a run\n", prop.name, sms, per_sm, n);
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    Buffers B{};
    CUDA_CHECK(cudaMalloc(&B.w, kWeightBytes));
    CUDA_CHECK(cudaMemset(B.w, 1, kWeightBytes));
    const int max_g = 16 * sms;
    CUDA_CHECK(cudaMalloc(&B.a, (max_g + 1) * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&B.b, (max_g + 1) * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&B.bar, 2 * sizeof(unsigned)));
    std::printf("%-6s %-9s %10s %10s %10s %10s %10s   (µs a phase; weights a phase = G × work; pdl0: weights, launch\n"
                "%-6s %-9s %10s %10s %10s %10s %10s    next, wait; pdl1: wait, launch next, weights; pdl2: wait, weights, launch next)\n",
                "G", "work KiB", "graph", "pdl0", "pdl1", "pdl2", "persistent", "", "", "", "", "", "", "");
    int failed = 0;
    for (int G : {sms, 2 * sms, 4 * sms, 16 * sms}) {
        for (size_t work_kib : {0, 4, 16}) {
            B.G = G;
            const size_t work = work_kib * 1024;
            double us[5] = {0, 0, 0, 0, 0};
            bool ok[5] = {true, true, true, true, true};
            for (int v = 0; v < 4; ++v) {
                cudaGraphExec_t e = capture(B, n, work, v - 1, s);
                us[v] = time_phases(B, n, s, [&] { CUDA_CHECK(cudaGraphLaunch(e, s)); }, ok[v]);
                CUDA_CHECK(cudaGraphExecDestroy(e));
            }
            if (G <= per_sm * sms) {
                us[4] = time_phases(B, n, s, [&] {
                    int nn = n;
                    size_t ww = work;
                    void* args[] = {&B.a, &B.b, &B.w, &ww, &nn, &B.bar};
                    CUDA_CHECK(cudaLaunchCooperativeKernel((void*)persistent_kernel, dim3(G), dim3(kThreads), args, 0, s));
                }, ok[4]);
            }
            std::printf("%-6d %-9zu", G, work_kib);
            for (int v = 0; v < 5; ++v) {
                if (v == 4 && G > per_sm * sms) std::printf(" %10s", "-");
                else std::printf(" %8.2f%s", us[v], ok[v] ? "  " : "!!");
                failed += !ok[v];
            }
            std::printf("\n");
        }
    }
    std::printf("kernel_boundary: %s\n", failed ? "ORDER CHECK FAILED (!! above)" : "every run's words checked");
    CUDA_CHECK(cudaFree(B.w));
    CUDA_CHECK(cudaFree(B.a));
    CUDA_CHECK(cudaFree(B.b));
    CUDA_CHECK(cudaFree(B.bar));
    CUDA_CHECK(cudaStreamDestroy(s));
    return failed ? 1 : 0;
}
