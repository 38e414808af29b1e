// Prefetch of predicted missed experts for the device-driven hybrid join (hybrid_device.h), decode passes only.
//
// The PCIe link is busy only while a layer's plan → stage runs; during the rest of the layer (the mixer, the router,
// the decode kernels, the join) it idles. A small persistent worker kernel on a stream of its own uses that time:
//   1. the plan kernel of layer l posts a request (its seq, l, T and a copy of the MoE input x) on the board;
//   2. the worker scores layer l+1's router against that x (the next layer's routing, predicted from this layer's
//      input: the residual streams change little from one layer to the next), takes the best-scored experts that
//      layer l+1 does not hold in a cache slot, and, once layer l's stage kernel is done with the link, copies them
//      from pinned host memory into prefetch slots (two sets, by layer parity), one expert at a time, each published
//      with the seq of the plan that may use it (the plan of l+1, seq + 1) after its bytes have landed, until the
//      plan of l+1 starts (a copy then in progress stops and is not published);
//   3. the plan kernel of layer l+1 places a missed pair whose expert is published for its seq like a cached one,
//      on the prefetch slot. Anything not published in time stays a miss, as without the worker.
// The worker keeps one 16-byte load a thread in flight: its queued host loads slow the pass's own kernels
// (bench/results/2026-12-04-h200-prefetch/: four a thread cost ~11 µs a layer before the plan).
// Being resident at all costs the pass too: with the worker running but copying nothing (STRATA_PREFETCH_COPIES=0),
// even as 2 blocks, the pass's kernels before the plan took ~84 µs a layer against 78 without it, and the decode
// kernels ~2 µs more (not the worker's registers or threads: capping them changed nothing; r42-r44 in
// bench/results/2026-12-04-h200-prefetch2/). The copies more than pay for it (+5-7% at pc12).
// STRATA_PREFETCH_MODE=dma (hybrid_prefetch_dma.cu) has no worker: the copy engine copies, a pick kernel a layer
// predicts; slower on the H200 (r48), kept for cards where the worker's residency costs more.
// Which pairs the GPU computes changes, not how: a pair on a prefetch slot runs the decode kernels over the same
// bytes as from a cache slot, so the tokens do not depend on the prediction (device_join_parity.py checks this).
// The worker is launched at each pass boundary and leaves when the host raises the stop word, after the request of
// the last MoE layer, or after kIdleExitNs without a request (passes without device-joined MoE calls).
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace strata::cuda {

constexpr int kPrefetchSlots = 8;        // prefetch slots a layer (two sets of them, by layer parity)
constexpr int kPrefetchCandidates = 16;  // the best-scored experts of the next layer that are considered
constexpr int kPrefetchMaxExperts = 1024;
constexpr int kPrefetchMaxH = 8192;

// Device memory the plan kernels and the worker share. The plan writes the request; the worker writes entries
// (expert, tag: the seq of the plan that may use the slot, written after the slot's bytes) and the candidate lists.
struct PrefetchBoard {
    uint32_t req_seq;                    // the last plan's seq (its x in x[req_seq & 1])
    uint32_t plan_seq;                   // the seq of the plan that started last (its first store: copies stop)
    int32_t req_layer, req_T;
    uint32_t stage_done;                 // the seq whose stage kernel has finished (its last block writes it)
    uint32_t stage_arrived;              // the stage kernel's block count (wraps to 0 at the last block)
    int32_t entry_expert[2][kPrefetchSlots], entry_layer[2][kPrefetchSlots];
    uint32_t entry_tag[2][kPrefetchSlots];
    int32_t cand[2][kPrefetchCandidates];   // the uncached candidates in score order (statistics)
    int32_t n_cand[2], cand_layer[2];
    uint32_t cand_tag[2];
    // worker-internal
    uint32_t bar_count, bar_gen;         // the worker's grid barrier
    uint32_t pick_arrived;               // the pick kernel's blocks done scoring (wraps to 0 at the last)
    uint32_t cmd_seq;                    // the request the worker's blocks take (block 0 decides)
    int32_t cmd_layer, cmd_T, cmd_exit;
    int32_t todo[kPrefetchSlots];
    int32_t n_todo;
    int32_t go;                          // block 0's decision to copy the next expert (1) or stop (0)
    int32_t copy_aborted;                // a block stopped the current copy (a newer plan came)
    unsigned long long copy_start_ns;
    // statistics (plan: misses; worker: the rest), copied to the host words by the worker as it leaves
    unsigned long long requests, copied, aborted, miss_pairs, predicted_pairs, used_pairs;
    unsigned long long copy_ns, copied_bytes;   // time in copies (aborted ones too) and the bytes published
};

// What the host reads (mapped memory): the stop word and the statistics the worker leaves there.
struct PrefetchWords {
    uint32_t stop;                       // host → worker: the tag of the last worker told to leave
    uint32_t pad;
    unsigned long long requests, copied, aborted, miss_pairs, predicted_pairs, used_pairs, copy_ns, copied_bytes;
};

// The copy-engine mode's hand-over (mapped memory): the pick kernel's choice for request `tag`, written before it.
struct PrefetchPick {
    uint32_t tag;                        // the request's seq (written last)
    int32_t layer, n;                    // the layer predicted, experts chosen (≤ kPrefetchSlots)
    int32_t todo[kPrefetchSlots];        // their ids; entry_expert / entry_layer of slots 0 … n−1 already name them
};

// What the worker needs of one MoE layer (a device array of them, one per layer).
struct PrefetchLayer {
    const float* router;                 // F32 [E, H] on the device, or null (no prediction for this layer)
    const uint8_t* host[3];              // gate, up, down tensors in pinned host memory (device addresses)
    size_t bytes[3];                     // one expert's gate, up, down matrix
};

struct PrefetchWorkerArgs {
    PrefetchBoard* board;                // device
    const float* x;                      // device [2][H]: the requests' inputs (the plan writes them)
    float* logits;                       // device [E] scratch
    PrefetchWords* words;                // mapped (device address)
    uint32_t tag;                        // this launch's tag (stop == tag: leave)
    int n_layers, E, H;
    const PrefetchLayer* layers;         // device [n_layers]
    const int32_t* slot_map;             // device [n_layers · E]: expert → cache slot or −1
    uint8_t* area[3];                    // prefetch slots: [2][kPrefetchSlots] matrices of stride[m] bytes
    size_t stride[3];
    bool after_stage;                    // wait for the layer's stage kernel before copying
    int max_copies;                      // experts copied a layer at most (≤ kPrefetchSlots; 0: predictions only)
    int depth;                           // 16-byte loads a thread keeps in flight (1 … 4)
};

// The worker on `s` with `blocks` blocks (all resident at once: the worker has a grid barrier).
void launch_prefetch_worker(cudaStream_t s, const PrefetchWorkerArgs& a, int blocks);
// The copy-engine mode: one prediction for request s (layer next − 1's plan) on `stream`, its choice into *out
// (mapped, device address). a.max_copies bounds the choice; the worker-only fields of `a` are not read.
void launch_prefetch_pick(cudaStream_t stream, const PrefetchWorkerArgs& a, uint32_t s, int next, PrefetchPick* out,
                          int blocks);

}  // namespace strata::cuda
