// The plan and join kernels of the device-driven hybrid join (backend/cuda/hybrid_device.h). Both run as one block:
// they move a few KB (the routing, the CPU's sums of a few tokens) and wait on mapped words. Mapped memory the host
// writes (done and consumed words, the CPU's sums) is read with ld.global.cv, so no stale cached line survives from
// an earlier pass.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/hybrid_device.h"
#include "backend/cuda/hybrid_trace.h"
#include "common/error.h"

namespace strata::cuda {

namespace {

constexpr int kThreads = 256;
constexpr unsigned long long kGiveUpNs = 60ull * 1000000000ull;

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// STRATA_HYBRID_TRACE: the time of `event` in the current layer's row (one thread; nothing without a table).
__device__ __forceinline__ void trace_stamp(const DeviceJoinState* st, int event, int layer) {
    if (st->trace) st->trace[(size_t)layer * kTrGpuEvents + event] = global_ns();
}
__device__ __forceinline__ void trace_stamp(const DeviceJoinState* st, int event) {
    trace_stamp(st, event, st->trace_layer);
}

// Polls *word until (int32)(*word − seq) ≥ −slack; on time-out sets timed_out and returns. Returns the ns waited;
// *polled (optional): whether the first look found the word short of it; *last (optional): the value read last.
__device__ unsigned long long wait_word(const uint32_t* word, uint32_t seq, int slack, uint32_t* timed_out,
                                        bool* polled = nullptr, uint32_t* last = nullptr) {
    const unsigned long long start = global_ns();
    if (polled) *polled = false;
    uint32_t v;
    while ((int32_t)((v = __ldcv(word)) - seq) < -slack) {
        if (polled) *polled = true;   // no sleep: each look is a PCIe round trip (~1 µs) already
        if (global_ns() - start > kGiveUpNs) {
            *(volatile uint32_t*)timed_out = 1;
            break;
        }
    }
    if (last) *last = v;
    return global_ns() - start;
}

// The routing and slots go to shared memory first (one load a thread, all in flight at once); thread 0 then places
// the pairs from there (a single thread's dependent loads from global memory cost ~0.5 µs each), and the pairs'
// tables and job fields are written by one thread a pair.
__global__ void __launch_bounds__(kThreads) hybrid_plan_kernel(PlanArgs a) {
    __shared__ int32_t slot[kDevicePairs], ids[kDevicePairs], place[kDevicePairs], stage_of[kDevicePairs];
    __shared__ int32_t pf_slot[kDevicePairs];   // the prefetch slot a missed pair's expert is on, or −1
    DeviceJoinWords* wd = a.words;
    const int P = a.T * a.k;
    if (threadIdx.x == 0) trace_stamp(a.state, kTrPlanStart, a.layer);
    // Every thread reads seq before thread 0 moves it on (the barrier below). The ring slot is free once the
    // dispatcher consumed the job kRingSlots before this one; the mapped word is read (a PCIe round trip) only when
    // the value read last time does not already show that.
    const uint32_t seq = a.state->seq + 1;
    if (a.pf && threadIdx.x == 0) *(volatile uint32_t*)&a.pf->plan_seq = seq;   // the worker's copies stop
    const int par = a.layer & 1;
    __shared__ int32_t pf_expert[kPrefetchSlots];   // the expert on each prefetch slot for this call, or −1
    for (int p = threadIdx.x; p < P; p += blockDim.x) {
        ids[p] = a.ids[p];
        slot[p] = a.slot_map[ids[p]];
    }
    if (a.pf && threadIdx.x < kPrefetchSlots) {   // a slot counts once its tag is this call's seq (set after its bytes)
        const int i = threadIdx.x;
        int32_t e = -1;
        if (*(const volatile uint32_t*)&a.pf->entry_tag[par][i] == seq) {
            __threadfence();
            if (*(const volatile int32_t*)&a.pf->entry_layer[par][i] == a.layer)
                e = *(const volatile int32_t*)&a.pf->entry_expert[par][i];
        }
        pf_expert[i] = e;
    }
    __shared__ int32_t pf_cand[kPrefetchCandidates];   // the worker's candidates for this call (statistics), or −1
    if (a.pf && threadIdx.x >= 32 && threadIdx.x < 32 + kPrefetchCandidates) {
        const int i = threadIdx.x - 32;
        int32_t e = -1;
        if (*(const volatile uint32_t*)&a.pf->cand_tag[par] == seq) {
            __threadfence();
            if (a.pf->cand_layer[par] == a.layer && i < a.pf->n_cand[par]) e = a.pf->cand[par][i];
        }
        pf_cand[i] = e;
    }
    const bool slot_free = (int32_t)(a.state->consumed_seen - seq) >= -kRingSlots;
    uint8_t* job_base = a.ring + (size_t)(seq % kRingSlots) * a.slot_bytes;
    DeviceJob* job = reinterpret_cast<DeviceJob*>(job_base);
    __syncthreads();
    // x goes to the host whether or not the CPU gets pairs (the dispatcher reads it only when it does): the copy
    // then starts before the placement instead of after it, by warps 1 … 7 (warp 0's thread 0 places the pairs).
    float* pf_x = a.pf && a.T == 1 ? a.pf_x + (size_t)(seq & 1) * a.H : nullptr;   // the worker's request
    const auto copy_x = [&] {
        if (threadIdx.x < 32) return;
        float* hx = job_x(job_base);
        for (int i = threadIdx.x - 32; i < a.T * a.H; i += blockDim.x - 32) {
            const float v = a.x[i];
            hx[i] = v;
            if (pf_x) pf_x[i] = v;
        }
    };
    for (int p = threadIdx.x; p < P; p += blockDim.x) {
        pf_slot[p] = -1;
        if (a.pf && slot[p] < 0)
            for (int i = 0; i < kPrefetchSlots && pf_slot[p] < 0; ++i)
                if (pf_expert[i] == ids[p]) pf_slot[p] = i;
    }
    if (a.pf) __syncthreads();
    if (slot_free) copy_x();
    if (threadIdx.x == 0) {
        a.state->trace_layer = a.layer;
        if (!slot_free) {
            uint32_t consumed = 0;
            wait_word(&wd->consumed, seq, kRingSlots, &wd->timed_out, nullptr, &consumed);
            a.state->consumed_seen = consumed;
        }
        if (a.pf) {   // statistics of the prefetch: missed pairs, those among the worker's candidates, those it holds
            int misses = 0, predicted = 0, used = 0;
            for (int p = 0; p < P; ++p) {
                if (slot[p] >= 0) continue;
                ++misses;
                bool in = false;
                for (int i = 0; i < kPrefetchCandidates && !in; ++i) in = pf_cand[i] == ids[p];
                predicted += in;
                if (pf_slot[p] >= 0) {
                    ++used;
                    slot[p] = kPrefetchSlots;   // placed like a cached pair (its matrices: pf_slot below)
                }
            }
            a.pf->miss_pairs += misses;
            a.pf->predicted_pairs += predicted;
            a.pf->used_pairs += used;
        }
        const bool staged = a.stage[0] != nullptr;
        const int n_cpu = place_pairs(ids, slot, P, a.state->share, a.host[0] != nullptr, place, &a.state->carry,
                                      staged ? kStageExperts : kDevicePairs);
        int32_t staged_expert[kStageExperts];
        int n_stage = 0;
        for (int p = 0; p < P; ++p) {
            const int e = ids[p];
            int z = -1;   // the staging slot of a zero-copy expert (one per distinct expert)
            if (staged && place[p] == kPairZeroCopy) {
                for (int i = 0; i < n_stage && z < 0; ++i)
                    if (staged_expert[i] == e) z = i;
                if (z < 0) {
                    z = n_stage++;
                    staged_expert[z] = e;
                    for (int m = 0; m < 3; ++m) {
                        a.state->stage_src[m][z] = a.host[m] + (size_t)e * a.host_stride[m];
                        a.state->stage_dst[m][z] = a.stage[m] + (size_t)z * a.host_stride[m];
                    }
                }
            }
            stage_of[p] = z;
        }
        job->layer = a.layer;
        job->T = a.T;
        job->k = a.k;
        job->n_cpu = n_cpu;
        a.state->seq = seq;
        a.state->n_cpu = n_cpu;
        a.state->n_stage = n_stage;
    }
    __syncthreads();
    for (int p = threadIdx.x; p < P; p += blockDim.x) {
        const int e = ids[p], z = stage_of[p];
        for (int m = 0; m < 3; ++m)
            a.state->tables[m][p] = place[p] == kPairCached
                                        ? pf_slot[p] >= 0
                                              ? a.pf_area[m] + (size_t)(par * kPrefetchSlots + pf_slot[p]) * a.pf_stride[m]
                                              : a.arena[m] + (size_t)slot[p] * a.arena_stride[m]
                                    : place[p] != kPairZeroCopy ? nullptr
                                    : z >= 0                    ? a.stage[m] + (size_t)z * a.host_stride[m]
                                                                : a.host[m] + (size_t)e * a.host_stride[m];
        job->ids[p] = e;
        job->weights[p] = a.weights[p];
        job->place[p] = place[p];
    }
    if (threadIdx.x == 0) trace_stamp(a.state, kTrPlanPlaced);
    if (!slot_free) copy_x();
    __threadfence_system();   // the job's fields and x reach the host before its seq
    __syncthreads();
    if (threadIdx.x == 0) {
        *(volatile uint32_t*)&job->seq = seq;
        *(volatile uint32_t*)&wd->published = seq;
        if (a.pf) {   // the worker's request (x is in pf_x when T = 1: the fence above covers it)
            a.pf->req_layer = a.layer;
            a.pf->req_T = a.T;
            __threadfence();
            *(volatile uint32_t*)&a.pf->req_seq = seq;
        }
        trace_stamp(a.state, kTrPlanEnd);
    }
}

// 1024 threads and 16-byte loads: the CPU's sums come over PCIe, so every thread's loads should be in flight at once
// (T = 1: one 16-byte load a thread, one round trip).
constexpr int kJoinThreads = 1024;

__global__ void __launch_bounds__(kJoinThreads)
hybrid_join_kernel(DeviceJoinState* state, uint8_t* ring, size_t slot_bytes, DeviceJoinWords* wd, int T, int H,
                   float* y) {
    if (threadIdx.x == 0) trace_stamp(state, kTrJoinStart);
    if (state->n_cpu == 0) {
        if (threadIdx.x == 0) {
            trace_stamp(state, kTrJoinSeen);
            trace_stamp(state, kTrJoinEnd);
        }
        return;
    }
    const uint32_t seq = state->seq;
    if (threadIdx.x == 0) {
        bool late = false;
        const unsigned long long ns = wait_word(&wd->done, seq, 0, &wd->timed_out, &late);
        trace_stamp(state, kTrJoinSeen);
        state->wait_ns += ns;   // one join at a time: no other writer
        state->late_joins += late;
        *(volatile unsigned long long*)&wd->wait_ns = state->wait_ns;
        *(volatile uint32_t*)&wd->late_joins = state->late_joins;
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
    if (state->trace) {
        __syncthreads();
        if (threadIdx.x == 0) trace_stamp(state, kTrJoinEnd);
    }
}

// Every thread of the grid copies 16-byte words of every (expert, matrix) copy in turn: with the whole grid's loads
// in flight at once, a kernel reads pinned host memory at the PCIe ceiling (tests/gpu/zero_copy_speed.cu: read10).
__global__ void hybrid_stage_kernel(const DeviceJoinState* state, size_t gate_bytes, size_t up_bytes,
                                    size_t down_bytes, PrefetchBoard* pf) {
    const int n = state->n_stage;
    if (blockIdx.x == 0 && threadIdx.x == 0) trace_stamp(state, kTrStageStart);
    const size_t bytes[3] = {gate_bytes, up_bytes, down_bytes};
    const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    for (int z = 0; z < n; ++z)
        for (int m = 0; m < 3; ++m) {
            const uint8_t* src = state->stage_src[m][z];
            uint8_t* dst = state->stage_dst[m][z];
            const size_t n16 = bytes[m] / 16;   // both 16-byte aligned (hybrid_stage checks the sizes)
            for (size_t i = tid; i < n16; i += stride)
                reinterpret_cast<uint4*>(dst)[i] = __ldcs(reinterpret_cast<const uint4*>(src) + i);
        }
    if (state->trace) {   // the last block to finish leaves its time
        __syncthreads();
        if (threadIdx.x == 0)
            atomicMax(state->trace + (size_t)state->trace_layer * kTrGpuEvents + kTrStageEnd, global_ns());
    }
    if (pf) {   // the last block to finish tells the prefetch worker the link is free (the count wraps to 0)
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            if (atomicInc(&pf->stage_arrived, gridDim.x - 1) == gridDim.x - 1)
                *(volatile uint32_t*)&pf->stage_done = state->seq;
        }
    }
}

}  // namespace

void hybrid_stage(cudaStream_t s, const DeviceJoinState* state, size_t gate_bytes, size_t up_bytes, size_t down_bytes,
                  PrefetchBoard* pf) {
    STRATA_CHECK(gate_bytes % 16 == 0 && up_bytes % 16 == 0 && down_bytes % 16 == 0,
                 "hybrid stage: expert matrices of ", gate_bytes, " / ", up_bytes, " / ", down_bytes,
                 " bytes are not whole 16-byte words");
    static const int sms = [] {
        int n = 0, dev = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
        return n;
    }();
    hybrid_stage_kernel<<<2 * sms, 512, 0, s>>>(state, gate_bytes, up_bytes, down_bytes, pf);
    CUDA_CHECK_LAUNCH();
}

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
