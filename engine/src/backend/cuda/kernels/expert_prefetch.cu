// The prefetch worker of the device-driven hybrid join (backend/cuda/expert_prefetch.h): a few resident blocks that
// wait for the plan kernels' requests, score the next layer's router, and copy the best-scored uncached experts from
// pinned host memory into prefetch slots. Block 0 takes every decision (which request, whether to go on) and hands
// it to the other blocks through the board and a grid barrier, so all blocks always take the same path.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/expert_prefetch.h"
#include "common/error.h"

namespace strata::cuda {

namespace {

constexpr int kThreads = 512;
constexpr int kMaxDepth = 4;   // PrefetchWorkerArgs::depth at most
constexpr unsigned long long kIdleExitNs = 5'000'000ull;    // no request for 5 ms: not a decode pass, leave
constexpr unsigned long long kStageWaitNs = 1'000'000ull;   // a stage kernel that does not finish within 1 ms

__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

template <class T> __device__ __forceinline__ T vload(const T* p) { return *(const volatile T*)p; }
template <class T> __device__ __forceinline__ void vstore(T* p, T v) { *(volatile T*)p = v; }

// Every block of the worker arrives before any leaves. The generation is read before arriving, so the last block's
// increment cannot be missed.
__device__ void grid_barrier(PrefetchBoard* b) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const uint32_t gen = vload(&b->bar_gen);
        __threadfence();
        if (atomicAdd(&b->bar_count, 1u) == gridDim.x - 1) {
            atomicExch(&b->bar_count, 0u);
            __threadfence();
            atomicAdd(&b->bar_gen, 1u);
        } else {
            while (vload(&b->bar_gen) == gen) __nanosleep(32);
        }
        __threadfence();
    }
    __syncthreads();
}

// Block 0, thread 0: waits for a request newer than `handled`, the stop word, or the idle time-out; 0 = leave.
__device__ uint32_t wait_request(const PrefetchWorkerArgs& a, uint32_t handled) {
    PrefetchBoard* b = a.board;
    const unsigned long long start = now_ns();
    for (unsigned it = 0;; ++it) {
        const uint32_t s = vload(&b->req_seq);
        if (s != handled) return s;
        if ((it & 31) == 0 && (vload(&a.words->stop) == a.tag || now_ns() - start > kIdleExitNs)) return 0;
        __nanosleep(256);
    }
}

// Block 0, thread 0: layer l's stage kernel (seq s) is done with the link; false when a newer plan ran meanwhile.
__device__ bool wait_stage(const PrefetchWorkerArgs& a, uint32_t s) {
    PrefetchBoard* b = a.board;
    const unsigned long long start = now_ns();
    for (;;) {
        if ((int32_t)(vload(&b->stage_done) - s) >= 0) return vload(&b->req_seq) == s;
        if (vload(&b->plan_seq) != s || now_ns() - start > kStageWaitNs) return false;
        __nanosleep(128);
    }
}

__device__ void leave(const PrefetchWorkerArgs& a) {
    const PrefetchBoard* b = a.board;
    PrefetchWords* w = a.words;
    vstore(&w->requests, vload(&b->requests));
    vstore(&w->copied, vload(&b->copied));
    vstore(&w->aborted, vload(&b->aborted));
    vstore(&w->miss_pairs, vload(&b->miss_pairs));
    vstore(&w->predicted_pairs, vload(&b->predicted_pairs));
    vstore(&w->used_pairs, vload(&b->used_pairs));
    vstore(&w->copy_ns, vload(&b->copy_ns));
    vstore(&w->copied_bytes, vload(&b->copied_bytes));
    __threadfence_system();
}

// The next layer's router scores, one warp a row: logits[e] = W[e] · x.
__device__ void score_rows(const float* __restrict__ W, const float* xs, int E, int H, float* logits) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int e = blockIdx.x * warps + warp; e < E; e += gridDim.x * warps) {
        const float4* w4 = reinterpret_cast<const float4*>(W + (size_t)e * H);
        const float4* x4 = reinterpret_cast<const float4*>(xs);
        float acc = 0.0f;
        for (int i = lane; i < H / 4; i += 32) {
            const float4 w = __ldg(w4 + i), x = x4[i];
            acc += w.x * x.x + w.y * x.y + w.z * x.z + w.w * x.w;
        }
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) logits[e] = acc;
    }
}

// Block 0: the kPrefetchCandidates best scores (rank by counting, ties to the lower id), then those not in a cache
// slot of layer `next`, in score order: the board's candidate list (tag s + 1) and the first kPrefetchSlots of them
// as the copies to make (a.max_copies at most).
__device__ void pick(const PrefetchWorkerArgs& a, int next, uint32_t s, float* sl) {
    PrefetchBoard* b = a.board;
    __shared__ int32_t best[kPrefetchCandidates];
    const int E = a.E;
    for (int e = threadIdx.x; e < E; e += blockDim.x) sl[e] = __ldcg(a.logits + e);
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        const float v = sl[e];
        int rank = 0;
        for (int j = 0; j < E && rank < kPrefetchCandidates; ++j) {
            const float u = sl[j];
            rank += u > v || (u == v && j < e);
        }
        if (rank < kPrefetchCandidates) best[rank] = e;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        const int par = next & 1;
        const int32_t* map = a.slot_map + (size_t)next * E;
        int n = 0;
        for (int r = 0; r < kPrefetchCandidates && r < E; ++r)
            if (__ldcg(map + best[r]) < 0) b->cand[par][n++] = best[r];
        b->n_cand[par] = n;
        b->cand_layer[par] = next;
        const int todo = n < a.max_copies ? n : a.max_copies;
        for (int i = 0; i < todo; ++i) b->todo[i] = b->cand[par][i];
        b->n_todo = todo;
        __threadfence();
        vstore(&b->cand_tag[par], s + 1);
    }
}

// The copy-engine mode's prediction (PrefetchPick): one request (s, next) scored by every block, picked by the last
// block to finish scoring, which also writes the chosen experts' entries (expert, layer; not the tag: the host's
// copies publish it after their bytes) and hands the list to the host through mapped memory.
__global__ void __launch_bounds__(256) prefetch_pick_kernel(PrefetchWorkerArgs a, uint32_t s, int next,
                                                            PrefetchPick* out) {
    extern __shared__ float smem[];   // [H] the request's x, then [E] the scores (the last block)
    PrefetchBoard* b = a.board;
    const float* x = a.x + (size_t)(s & 1) * a.H;
    for (int i = threadIdx.x; i < a.H; i += blockDim.x) smem[i] = __ldcg(x + i);
    __syncthreads();
    score_rows(a.layers[next].router, smem, a.E, a.H, a.logits);
    __threadfence();
    __syncthreads();
    __shared__ bool last;
    if (threadIdx.x == 0) last = atomicInc(&b->pick_arrived, gridDim.x - 1) == gridDim.x - 1;   // (wraps to 0)
    __syncthreads();
    if (!last) return;
    __threadfence();
    pick(a, next, s, smem + a.H);
    if (threadIdx.x == 0) {
        ++b->requests;
        const int par = next & 1, n = b->n_todo;
        for (int i = 0; i < n; ++i) {
            b->entry_expert[par][i] = b->todo[i];
            b->entry_layer[par][i] = next;
            vstore(&out->todo[i], b->todo[i]);
        }
        vstore(&out->n, n);
        vstore(&out->layer, next);
        __threadfence_system();
        vstore(&out->tag, s);
    }
}

// Expert e of layer `next` from host memory into prefetch slot i of the layer's set: a.depth 16-byte loads a thread in
// flight (the worker shares the GPU's memory system with the pass: loads queued behind the PCIe link slow the pass's
// own kernels, so it keeps only what the link needs in flight). A thread that sees a plan newer than s start (the
// copy is too late to be used) stops and raises the board's copy_aborted, so the link is free for that plan at once.
__device__ void copy_expert(const PrefetchWorkerArgs& a, int next, int e, int i, uint32_t s) {
    const size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    PrefetchBoard* b = a.board;
    const int depth = a.depth;
    for (int m = 0; m < 3; ++m) {
        const size_t bytes = a.layers[next].bytes[m];
        const uint4* src = reinterpret_cast<const uint4*>(a.layers[next].host[m] + (size_t)e * bytes);
        uint4* dst = reinterpret_cast<uint4*>(a.area[m] + (size_t)((next & 1) * kPrefetchSlots + i) * a.stride[m]);
        const size_t n16 = bytes / 16;
        for (size_t j = tid; j < n16; j += depth * stride) {
            if (vload(&b->plan_seq) != s) {
                vstore(&b->copy_aborted, 1);
                return;
            }
            uint4 v[kMaxDepth];
#pragma unroll
            for (int d = 0; d < kMaxDepth; ++d)
                if (d < depth && j + d * stride < n16) v[d] = __ldcs(src + j + d * stride);
#pragma unroll
            for (int d = 0; d < kMaxDepth; ++d)
                if (d < depth && j + d * stride < n16) dst[j + d * stride] = v[d];
        }
    }
}

__global__ void __launch_bounds__(kThreads) prefetch_worker_kernel(PrefetchWorkerArgs a) {
    extern __shared__ float smem[];   // [H] the request's x, then [E] the scores (block 0)
    PrefetchBoard* b = a.board;
    uint32_t handled = vload(&b->req_seq);   // (block 0's) a request posted before this launch is not taken
    for (;;) {
        if (blockIdx.x == 0 && threadIdx.x == 0) {
            const uint32_t s = wait_request(a, handled);
            b->cmd_exit = s == 0;
            if (s) {
                __threadfence();
                b->cmd_layer = vload(&b->req_layer);
                b->cmd_T = vload(&b->req_T);
            }
            b->cmd_seq = s;
        }
        grid_barrier(b);
        const uint32_t s = vload(&b->cmd_seq);
        const int layer = vload(&b->cmd_layer), T = vload(&b->cmd_T), next = layer + 1;
        const bool exit_now = vload(&b->cmd_exit);
        grid_barrier(b);   // every block has read the command before block 0 may write the next one
        if (exit_now) break;
        handled = s;
        const bool last = next >= a.n_layers;
        if (T != 1 || last || !a.layers[next].router) {
            if (last) break;   // the pass's last MoE layer: nothing left to predict
            continue;
        }
        if (blockIdx.x == 0 && threadIdx.x == 0) ++b->requests;
        const float* x = a.x + (size_t)(s & 1) * a.H;
        for (int i = threadIdx.x; i < a.H; i += blockDim.x) smem[i] = __ldcg(x + i);
        __syncthreads();
        score_rows(a.layers[next].router, smem, a.E, a.H, a.logits);
        __threadfence();
        grid_barrier(b);
        if (blockIdx.x == 0) pick(a, next, s, smem + a.H);
        grid_barrier(b);
        const int n_todo = vload(&b->n_todo);
        for (int i = 0; i < n_todo; ++i) {
            if (blockIdx.x == 0 && threadIdx.x == 0) {
                const bool go = (i > 0 || !a.after_stage || wait_stage(a, s)) && vload(&b->plan_seq) == s &&
                                vload(&a.words->stop) != a.tag;
                if (!go) b->aborted += n_todo - i;
                b->go = go;
                b->copy_aborted = 0;
                b->copy_start_ns = now_ns();
            }
            grid_barrier(b);
            if (!vload(&b->go)) break;
            const int e = vload(&b->todo[i]);
            copy_expert(a, next, e, i, s);
            __threadfence();
            grid_barrier(b);
            if (blockIdx.x == 0 && threadIdx.x == 0) {
                b->copy_ns += now_ns() - b->copy_start_ns;
                if (vload(&b->copy_aborted)) {   // cut short: not published (the next iteration stops)
                    ++b->aborted;
                } else {   // the slot's bytes have landed: publish it for plan s + 1
                    const int par = next & 1;
                    b->entry_expert[par][i] = e;
                    b->entry_layer[par][i] = next;
                    __threadfence();
                    vstore(&b->entry_tag[par][i], s + 1);
                    ++b->copied;
                    for (int m = 0; m < 3; ++m) b->copied_bytes += a.layers[next].bytes[m];
                }
            }
        }
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) leave(a);
}

}  // namespace

void launch_prefetch_pick(cudaStream_t stream, const PrefetchWorkerArgs& a, uint32_t s, int next, PrefetchPick* out,
                          int blocks) {
    STRATA_CHECK(a.H % 4 == 0 && a.H <= kPrefetchMaxH && a.E <= kPrefetchMaxExperts && blocks > 0 && next >= 0 &&
                     next < a.n_layers,
                 "expert prefetch: H ", a.H, ", E ", a.E, " or layer ", next, " out of range");
    const size_t smem = (size_t)(a.H + a.E) * sizeof(float);
    static bool attr_set = false;
    if (!attr_set && smem > 48 * 1024) {
        CUDA_CHECK(cudaFuncSetAttribute(prefetch_pick_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attr_set = true;
    }
    prefetch_pick_kernel<<<blocks, 256, smem, stream>>>(a, s, next, out);
    CUDA_CHECK_LAUNCH();
}

void launch_prefetch_worker(cudaStream_t s, const PrefetchWorkerArgs& a, int blocks) {
    STRATA_CHECK(a.H % 4 == 0 && a.H <= kPrefetchMaxH && a.E <= kPrefetchMaxExperts && blocks > 0 && a.depth >= 1 &&
                     a.depth <= kMaxDepth,
                 "expert prefetch: H ", a.H, " or E ", a.E, " out of range");
    const size_t smem = (size_t)(a.H + a.E) * sizeof(float);
    static bool attr_set = false;
    if (!attr_set && smem > 48 * 1024) {
        CUDA_CHECK(cudaFuncSetAttribute(prefetch_worker_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attr_set = true;
    }
    prefetch_worker_kernel<<<blocks, kThreads, smem, s>>>(a);
    CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
