// The device-driven join of the hybrid MoE path for decode and verify calls (T ≤ 8, T·k ≤ 64): every step of a
// layer is stream-ordered work without the host, so a decode pass with an expert cache replays as one CUDA graph.
//
//   plan (1 block)  reads the routing and the layer's slot map (a device copy of the host's, renewed only between
//                   passes), picks for every (token, expert) pair: a cached slot (or a prefetch slot the worker of
//                   expert_prefetch.h filled for this call), a zero-copy read of the expert from pinned host memory,
//                   or the CPU; writes the GPU's matrix tables and posts the job (routing, the
//                   choice, x when the CPU has pairs) into a ring of mapped slots, its seq last.
//   stage (grid)    with staging slots: copies the call's zero-copy experts from pinned host memory into them with
//                   16-byte loads (~50 GB/s over PCIe Gen5 on the H200 host, against ~36 when the decode kernels
//                   read host memory themselves: tests/gpu/zero_copy_speed.cu); the tables then point there.
//   experts         moe_decode over the tables (kernels/moe_decode.cuh): the cached and zero-copy pairs, weighted sum.
//   shared expert   the caller's, on the GPU meanwhile.
//   join (1 block)  when the CPU has pairs: waits for the CPU's done word to reach the job's seq, then adds the CPU's
//                   weighted sum (ring slot, mapped) into y.
// The CPU side (HybridMoe's dispatcher) polls the ring in seq order, records the routing in the cache, computes its
// pairs and publishes done = seq. Ring slots are reused only after the dispatcher consumed them (the plan waits).
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/expert_prefetch.h"
#include "backend/cuda/kernels/moe_gate_up.h"
#include "experts/device_jobs.h"   // DeviceJob, the ring slot layout
#include "experts/pair_places.h"

namespace strata::cuda {

static_assert(kDevicePairs <= kMoeDecodeMaxPairs, "moe_decode over tables takes every pair of a call");

constexpr int kStageExperts = 16;   // staging slots: zero-copy experts of one call at most (decode: ≤ 10)

// Words the host and the GPU share (one mapped page).
struct DeviceJoinWords {
    uint32_t published;      // GPU → host: the last seq posted
    uint32_t consumed;       // host → GPU: the last seq the dispatcher finished with (ring slots up to it are free)
    uint32_t done;           // host → GPU: the last seq whose CPU results are in its ring slot
    uint32_t timed_out;      // GPU → host: a wait gave up after ~60 s
    unsigned long long wait_ns;   // GPU → host: time the join kernels spent waiting for the CPU
    uint32_t late_joins;     // GPU → host: joins that found the CPU's results not yet there (MissShareBalance)
    float share_next;        // host only: the zero-copy share copied into DeviceJoinState::share between passes
};

// Device memory of the path: the running seq, the current call's CPU pair count and the matrix tables.
struct DeviceJoinState {
    uint32_t seq;
    int32_t n_cpu;
    float share;             // place_pairs' share of the missed experts read zero-copy (set between passes)
    float carry;             // place_pairs' rounding carry from layer to layer
    const uint8_t* tables[3][kDevicePairs];   // gate, up, down matrix of each pair (null: the CPU's pair)
    int32_t n_stage;                          // zero-copy experts the stage kernel copies for the current call
    const uint8_t* stage_src[3][kStageExperts];   // host (device address) → staging slot, per matrix
    uint8_t* stage_dst[3][kStageExperts];
    unsigned long long wait_ns;   // the join kernels' totals, copied to DeviceJoinWords by plain stores (a read of
    uint32_t late_joins;          // the mapped words would cost a PCIe round trip a join)
    unsigned long long* trace;    // STRATA_HYBRID_TRACE: [layer][GpuTraceEvent] globaltimer stamps, or null
    int32_t trace_layer;          // the layer of the current call (set by the plan)
    uint32_t consumed_seen;       // DeviceJoinWords::consumed as the plan last read it
};

struct PlanArgs {
    const int32_t* ids;          // device [P]
    const float* weights;        // device [P]
    const float* x;              // device [T, H]
    int T, k, H, layer;
    const int32_t* slot_map;     // device [E]: this layer's expert → slot or −1 (a copy of the host's, made between passes)
    const uint8_t* arena[3];     // slot arenas of gate, up, down (may be null with no slots)
    size_t arena_stride[3];      // bytes of one slot's matrix
    const uint8_t* host[3];      // zero-copy device addresses of the layer's host tensors (null: no zero-copy)
    size_t host_stride[3];       // bytes of one expert's matrix
    uint8_t* stage[3];           // staging slots of gate, up, down (kStageExperts each, host_stride apart), or null
    uint8_t* ring;               // mapped ring (device address), kRingSlots slots of slot_bytes
    size_t slot_bytes;
    DeviceJoinWords* words;      // mapped (device address)
    DeviceJoinState* state;      // device
    PrefetchBoard* pf;           // the prefetch worker's board (expert_prefetch.h), or null
    float* pf_x;                 // device [2][H]: a T = 1 call's x for the worker's request
    uint8_t* pf_area[3];         // prefetch slots of gate, up, down: [2][kPrefetchSlots] matrices
    size_t pf_stride[3];         // bytes between them
};

void hybrid_plan(cudaStream_t s, const PlanArgs& a);
// The copies of the current call's zero-copy experts into their staging slots (nothing without any), stream-ordered
// between the plan and the decode kernels. bytes: of one expert's gate, up, down matrix.
// pf (optional): its last block marks the call's seq as staged on the prefetch board (the worker then copies).
void hybrid_stage(cudaStream_t s, const DeviceJoinState* state, size_t gate_bytes, size_t up_bytes, size_t down_bytes,
                  PrefetchBoard* pf = nullptr);
// y[T, H] += the CPU's sums of the current call (after waiting for them), nothing when the call had no CPU pairs.
void hybrid_join(cudaStream_t s, DeviceJoinState* state, uint8_t* ring, size_t slot_bytes, DeviceJoinWords* words,
                 int T, int H, float* y);

}  // namespace strata::cuda
