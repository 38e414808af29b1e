// The plan and join kernels of the device-driven hybrid join (backend/cuda/hybrid_device.h). Both run as one block:
// they move a few KB (the routing, the CPU's sums of a few tokens) and wait on mapped words. Mapped memory the host
// writes (done and consumed words, the CPU's sums) is read with ld.global.cv, so no stale cached line survives from
// an earlier pass.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/hybrid_device.h"

namespace strata::cuda {

namespace {

constexpr int kThreads = 256;
constexpr unsigned long long kGiveUpNs = 60ull * 1000000000ull;

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Polls *word until (int32)(*word − seq) ≥ −slack; on time-out sets timed_out and returns. Returns the ns waited.
__device__ unsigned long long wait_word(const uint32_t* word, uint32_t seq, int slack, uint32_t* timed_out) {
    const unsigned long long start = global_ns();
    while ((int32_t)(__ldcv(word) - seq) < -slack) {
        __nanosleep(200);
        if (global_ns() - start > kGiveUpNs) {
            *(volatile uint32_t*)timed_out = 1;
            break;
        }
    }
    return global_ns() - start;
}

__global__ void __launch_bounds__(kThreads) hybrid_plan_kernel(PlanArgs a) {
    __shared__ uint32_t s_seq;
    __shared__ int s_cpu;
    __shared__ int32_t slot[kDevicePairs];
    DeviceJoinWords* wd = a.words;
    const int P = a.T * a.k;
    uint8_t* job_base = nullptr;
    for (int p = threadIdx.x; p < P; p += blockDim.x) slot[p] = a.slot_map[a.ids[p]];   // all loads at once
    __syncthreads();
    if (threadIdx.x == 0) {
        const uint32_t seq = a.state->seq + 1;
        // The ring slot is free once the dispatcher consumed the job kRingSlots before this one.
        wait_word(&wd->consumed, seq, kRingSlots, &wd->timed_out);
        int32_t place[kDevicePairs];
        const int n_cpu = place_pairs(a.ids, slot, P, a.state->share, a.host[0] != nullptr, place, &a.state->carry);
        job_base = a.ring + (size_t)(seq % kRingSlots) * a.slot_bytes;
        DeviceJob* job = reinterpret_cast<DeviceJob*>(job_base);
        for (int p = 0; p < P; ++p) {
            const int e = a.ids[p];
            for (int m = 0; m < 3; ++m)
                a.state->tables[m][p] = place[p] == kPairCached     ? a.arena[m] + (size_t)slot[p] * a.arena_stride[m]
                                        : place[p] == kPairZeroCopy ? a.host[m] + (size_t)e * a.host_stride[m]
                                                                    : nullptr;
            job->ids[p] = e;
            job->weights[p] = a.weights[p];
            job->place[p] = place[p];
        }
        job->layer = a.layer;
        job->T = a.T;
        job->k = a.k;
        job->n_cpu = n_cpu;
        a.state->seq = seq;
        a.state->n_cpu = n_cpu;
        s_seq = seq;
        s_cpu = n_cpu;
    }
    __syncthreads();
    const uint32_t seq = s_seq;
    job_base = a.ring + (size_t)(seq % kRingSlots) * a.slot_bytes;
    if (s_cpu > 0) {
        float* hx = job_x(job_base);
        for (int i = threadIdx.x; i < a.T * a.H; i += blockDim.x) hx[i] = a.x[i];
    }
    __threadfence_system();   // the job's fields and x reach the host before its seq
    __syncthreads();
    if (threadIdx.x == 0) {
        *(volatile uint32_t*)&reinterpret_cast<DeviceJob*>(job_base)->seq = seq;
        *(volatile uint32_t*)&wd->published = seq;
    }
}

// 1024 threads and 16-byte loads: the CPU's sums come over PCIe, so every thread's loads should be in flight at once
// (T = 1: one 16-byte load a thread, one round trip).
constexpr int kJoinThreads = 1024;

__global__ void __launch_bounds__(kJoinThreads)
hybrid_join_kernel(const DeviceJoinState* state, uint8_t* ring, size_t slot_bytes, DeviceJoinWords* wd, int T, int H,
                   float* y) {
    if (state->n_cpu == 0) return;
    const uint32_t seq = state->seq;
    if (threadIdx.x == 0) {
        const unsigned long long ns = wait_word(&wd->done, seq, 0, &wd->timed_out);
        volatile unsigned long long* acc = &wd->wait_ns;
        *acc = *acc + ns;
        __threadfence_system();
    }
    __syncthreads();
    const float* out = job_out(ring + (size_t)(seq % kRingSlots) * slot_bytes, H);
    const int n = T * H;
    if ((n & 3) == 0 && ((uintptr_t)y & 15) == 0) {   // job_out is 16-byte aligned (slot and header sizes)
        const float4* o4 = reinterpret_cast<const float4*>(out);
        float4* y4 = reinterpret_cast<float4*>(y);
        for (int i = threadIdx.x; i < n / 4; i += blockDim.x) {
            const float4 o = __ldcv(o4 + i);
            float4 v = y4[i];
            v.x += o.x;
            v.y += o.y;
            v.z += o.z;
            v.w += o.w;
            y4[i] = v;
        }
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] += __ldcv(out + i);
    }
}

}  // namespace

void hybrid_plan(cudaStream_t s, const PlanArgs& a) {
    hybrid_plan_kernel<<<1, kThreads, 0, s>>>(a);
    CUDA_CHECK_LAUNCH();
}

void hybrid_join(cudaStream_t s, DeviceJoinState* state, uint8_t* ring, size_t slot_bytes, DeviceJoinWords* words,
                 int T, int H, float* y) {
    hybrid_join_kernel<<<1, kJoinThreads, 0, s>>>(state, ring, slot_bytes, words, T, H, y);
    CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
