// Prompt-sized matmuls (T >= kTiledMinRows activation rows): tiles of weight rows decoded once into shared memory
// and multiplied with tiles of activation rows, for one matrix and for routed experts (pairs sorted by expert on the
// device first). STRATA_CUDA_TILED=0 turns the path off (the T <= 8 tile kernels of matmul.cu then serve all T).
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/kernels/kernels.h"

namespace strata::cuda {

constexpr int kTiledMinRows = 32;   // activation rows (dense) or tokens (experts) from which the tiled path is taken

void tiled_upload_tables();   // once per process (this file's copies of the i-quant tables)
bool tiled_enabled();         // STRATA_CUDA_TILED is not "0"; read once
// The tensor-core kernels (matmul_mmq.cuh) for formats with an integer decoder and Q8 activations: on by default on
// sm_80+ (STRATA_CUDA_MMQ=0 off); tiled_set_mmq for tests: 1 on, 2 on with every chunk's sums a float (no super-block
// integers, STRATA_CUDA_MMQ_SUPER=0), 0 off, -1 the variables again; launches since start.
void tiled_set_mmq(int mode);
int64_t tiled_mmq_calls();
// Whether the tiled kernels take this weight format and row length.
bool tiled_supported(GgmlType t, int n);

// One matrix (m.ids null): y[p] = W · x[p / act_div] for p < P; activations as matmul takes them (act.q null: f32 x,
// else the Q8 rows, multiplied as int8 · scale). False (nothing launched) when the path is off or does not apply.
bool matmul_tiled(cudaStream_t s, const MatmulArgs& m, const float* x, ActQ8 act, int P, float* y);

// Pairs sorted by expert: order[] the pair indices grouped by expert, items[] the (expert, first slot, count) tiles
// of at most kExpertTile pairs, *n_items on the device. Scratch of expert_order_bytes(P, E).
struct ExpertOrder {
    int32_t* order = nullptr;
    int4* items = nullptr;
    int32_t* n_items = nullptr;
    int max_items = 0;
};
constexpr int kMaxTiledExperts = 4000;
size_t expert_order_bytes(int P, int E);
ExpertOrder sort_by_expert(cudaStream_t s, const int32_t* ids, int P, int E, void* scratch);
// y[p] = W_{ids[p]} · x[p / act_div] for the pairs of o (m.ids is not read: o holds the grouping).
void matmul_tiled_experts(cudaStream_t s, const MatmulArgs& m, const ExpertOrder& o, const float* x, ActQ8 act, int P,
                          float* y);

}  // namespace strata::cuda
