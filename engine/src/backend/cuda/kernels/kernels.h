// Host-side launchers of the CUDA kernels, one group per file of kernels/ (named like the Backend op). All take
// device pointers and run on the given stream; shapes and formulas are those of backend/backend.h.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "gguf/ggml_types.h"

namespace strata::cuda {

// ---- matmul.cu: weight formats, activation quantization, matrix products, row gathers (embed) ----
void upload_iq_tables();                      // once per process, before the first matmul
bool format_supported(GgmlType t);
// The activation block a weight format multiplies with, as the CPU path quantizes it: 0 = f32 activations,
// 32 = Q8_0 (fp16-rounded scale per 32), 256 = Q8_K (f32 scale per 256).
int act_block(GgmlType t);
// Activations quantized for a weight format: int8 q [rows, n] and one scale per act_block values.
struct ActQ8 {
    int8_t* q = nullptr;
    float* d = nullptr;
};
void quantize_act(cudaStream_t s, int block, const float* x, int rows, int n, ActQ8 a);

// y[p, r] = Σ_i W_p[r, i] · x[p / act_div, i] for p < P, W_p = w + (ids ? ids[p] : 0) · mat_stride bytes.
struct MatmulArgs {
    GgmlType type = GgmlType::F32;
    const uint8_t* w = nullptr;
    size_t row_bytes = 0;
    int64_t rows = 0;           // output rows of one matrix
    int n = 0;                  // inputs per row
    size_t mat_stride = 0;      // bytes between the matrices that ids pick (3-D expert tensors)
    const int32_t* ids = nullptr;  // device, one matrix id per p; null = the one matrix w
    int act_div = 1;            // activation row of p = p / act_div
    // Decode-path experts only (moe_decode): device table of each pair's matrix instead of w + ids[p]·mat_stride;
    // a null entry skips the pair (its product is added elsewhere: the hybrid path's CPU pairs).
    const uint8_t* const* mats = nullptr;
};
// x: f32 activations; act: the same rows quantized, used for block formats unless act.q is null (then block formats
// multiply with x as well: the f32-activation mode).
void matmul(cudaStream_t s, const MatmulArgs& m, const float* x, ActQ8 act, int P, float* y);
int64_t matmul_q6k_t1_calls();   // launches of the Q6_K one-row kernel for many rows (the head), since start
int64_t matmul_t1_staged_calls();   // launches of the staged one-row kernel for many rows (matmul_q8_staged_kernel)
// matmul with Q8 activations where each kernel block quantizes the x rows it reads itself (same arithmetic as
// quantize_act, so the same bits as quantize_act + matmul) instead of a separate quantize launch. Only for block
// formats, P ≤ 8 activation rows that fit in shared memory; returns false (nothing launched) otherwise.
bool matmul_fused_quant(cudaStream_t s, const MatmulArgs& m, const float* x, int P, float* y);
// y[t] = row ids[t] of the table, dequantized; ids on the device.
void dequant_rows(cudaStream_t s, GgmlType type, const uint8_t* w, size_t row_bytes, int n, const int32_t* ids, int T,
                  float* y);

// ---- elementwise.cu ----
void fill(cudaStream_t s, float* x, float v, size_t n);
// out[r] = the first index of row r's largest value (NaN skipped, 0 when all are NaN), x [rows, n], out device int32.
// state: argmax_state_bytes() of device memory, zeroed once, used by one stream at a time (a long single row is
// split over many blocks that meet there); null: one block a row.
size_t argmax_state_bytes();
void argmax_rows(cudaStream_t s, const float* x, int rows, int n, int32_t* out, void* state);
void unary(cudaStream_t s, Unary f, const float* x, size_t n, float scale, float* y);
void mul(cudaStream_t s, const float* a, const float* b, size_t n, float* y);
void add(cudaStream_t s, float* y, const float* x, size_t n);
void scale(cudaStream_t s, float* x, size_t n, float v);
void row_op(cudaStream_t s, bool multiply, float* x, int T, int width, const float* v);   // add_row / mul_row
void slice_cols(cudaStream_t s, const float* x, int T, int width, int c0, int nc, float* y);
void concat_cols(cudaStream_t s, const float* a, const float* b, int rows, int wa, int wb, float* y);
void deinterleave(cudaStream_t s, const float* x, int T, int n_heads, int la, int lb, float* a, float* b);
void mean_rows(cudaStream_t s, const float* x, int rows, int width, float* y);
void repeat_streams(cudaStream_t s, const float* e, int T, int n, int H, float* X);
// Combination of the routed experts: y[t, c] = Σ_j w[t, j] · down[t·k + j, c].
void moe_combine(cudaStream_t s, const float* down, const float* w, int T, int k, int H, float* y);
// h[p, i] = silu(gate[p, i]) · up[p, i].
void swiglu(cudaStream_t s, const float* gate, const float* up, size_t n, float* h);

// ---- routing.cu ---- Backend::route_topk on the device: ids, weights [T, k] from logits [T, E] (E ≤ 3000).
void route_topk(cudaStream_t s, const float* logits, int T, int E, int k, int32_t* ids, float* weights);

// ---- select_cells.cu ---- Backend::select_cells; scratch of select_cells_scratch_bytes (ties at the budget).
size_t select_cells_scratch_bytes(int T, int stride);
void select_cells(cudaStream_t s, const float* scores, int stride, int T, const int32_t* pos, int cr, int kb,
                  const int32_t* off, int32_t* cells, void* scratch);

// ---- moe_hybrid.cu: the expert-cache path ----
// y[i] = x[rows[i]] for i < n; x, y rows of `width` floats; rows on the device.
void gather_rows(cudaStream_t s, const float* x, const int32_t* rows, int n, int width, float* y);
// y[t, c] = Σ_j w[t, j] · out[row_of_pair[t·k + j], c] (j ascending, as moe_combine): expert outputs in any row order.
void moe_combine_rows(cudaStream_t s, const float* out, const int32_t* row_of_pair, const float* w, int T, int k,
                      int H, float* y);

// ---- rms_norm.cu ----
void rms_norm(cudaStream_t s, const float* x, const float* w, int w_len, int rows, int width, int group, float eps,
              float* y);
void l2_norm(cudaStream_t s, const float* x, int rows, int width, int group, float eps, float scale, float* y);

// ---- hyper.cu: hyper-connection read mix and write, the PLE gate ----
void hyper_mix(cudaStream_t s, const float* xn, const float* m, int T, int n, int H, float* u);
void hyper_inject(cudaStream_t s, float* X, const float* inj, const float* y, int T, int n, int H);
void ple_gate(cudaStream_t s, const float* K, const float* Q, const float* v, int T, int n, int H, float* gv);

// ---- hyper_read.cu ---- Backend::hyper_read in three kernels. Weights in their stored formats on the device (inject
// null: no inj output); norm as f32 (norm_len values). Supported: T <= 8, n <= 8, r <= 512, n·H % 256 == 0 and the
// formats of the GGUF layouts (else hyper_read_supported is false and the caller composes the primitive ops);
// STRATA_CUDA_FUSED_HYPER=0 turns it off. Scratch of hyper_read_scratch_bytes.
struct HyperReadArgs {
    const float* norm = nullptr;
    int norm_len = 0;
    GgmlType down_type = GgmlType::F32, inject_type = GgmlType::F32, up_type = GgmlType::F32;
    const uint8_t* down = nullptr;
    const uint8_t* inject = nullptr;
    const uint8_t* up = nullptr;
    size_t down_rb = 0, inject_rb = 0, up_rb = 0;   // row bytes
    int n = 0, H = 0, r = 0;
    float eps = 0.0f;
    bool f32_act = false;   // block formats multiply f32 activations (CudaBackend's f32_activations mode)
};
bool hyper_read_supported(const HyperReadArgs& a, int T);
size_t hyper_read_scratch_bytes(const HyperReadArgs& a, int T);
void hyper_read(cudaStream_t s, const HyperReadArgs& a, const float* X, int T, void* scratch, float* u, float* inj);
// hyper_inject(X, inj_prev, y) then hyper_read of the new X: on the two-kernel path (T ≤ 4, X and y 16-byte aligned,
// H % 4 == 0) the injection is folded into the read's first kernel (no launch of its own); else the two ops.
// inj_prev may be inj. Scratch: hyper_read_scratch_bytes.
void hyper_inject_read(cudaStream_t s, const HyperReadArgs& a, float* X, const float* inj_prev, const float* y, int T,
                       void* scratch, float* u, float* inj);
int64_t hyper_inject_read_folded_calls();   // hyper_inject_read calls that folded the injection, since start
void hyper_read_upload_tables();    // once per process (this file's copies of the i-quant tables)
int64_t hyper_read_fused_calls();   // calls that took the fused path, since start

// ---- causal_conv.cu ---- w [C, K] as f32; tmp: (K−1)·dil·C floats of scratch for the history update.
void causal_conv(cudaStream_t s, const float* x, int T, int C, const float* w, int K, int dil, float* hist, float* tmp,
                 float* y);

// ---- gdn_recurrent.cu ----
void gdn_recurrent(cudaStream_t s, const float* q, const float* k, const float* v, const float* g, const float* beta,
                   int T, int nk, int nv, int dk, int dv, float* S, float* o);

// ---- gdn_fused.cu ---- Backend::gdn_block between its projections (d ≤ 128, K ≤ 8: gdn_fused_supported).
bool gdn_fused_supported(int d, int K);
// conv [T, cd] = silu(causal_conv(qkv)), cd = (2·nk + nv)·d: the q heads (first nk·d columns) l2-normed and scaled by
// 1/√d, the k heads l2-normed, the v heads as they are. qkv rows at stride ld ≥ cd; w [cd, K] f32; hist [K−1, cd]
// moves on by T rows.
void gdn_conv_norm(cudaStream_t s, const float* qkv, int ld, int T, int nk, int nv, int d, const float* w, int K,
                   float* hist, float* conv);
// The recurrence (as gdn_recurrent) with its gates β = σ(beta), g = a · softplus(alpha + dt_bias) and the gated RMSNorm
// o[t, h] = rmsnorm(out[t, h]) · norm · σ(z[t, h]) per value head h; q, k, v from conv (as gdn_conv_norm writes it).
struct GdnGatedArgs {
    const float* conv = nullptr;
    int nk = 0, nv = 0, d = 0;
    const float* beta = nullptr;     // raw projections [T, nv] at row strides ld_beta, ld_alpha
    const float* alpha = nullptr;
    int ld_beta = 0, ld_alpha = 0;
    const float* z = nullptr;        // raw gate projection [T, nv·d] at row stride ld_z
    int ld_z = 0;
    const float* dt_bias = nullptr;  // [nv] f32
    const float* a = nullptr;        // [nv] f32, −exp(A_log)
    const float* norm = nullptr;     // [norm_len] f32, value column c of o uses norm[c % norm_len]
    int norm_len = 0;
    float eps = 0.0f;
    // qblk 32 / 256: o also written quantized as quantize_act does (q [T, nv·d] int8, qd one scale per qblk), for
    // the out projection; only where gdn_quantize_block(d, nv, qblk) == qblk. 0: not quantized.
    int qblk = 0;
    int8_t* q = nullptr;
    float* qd = nullptr;
    // conv null: gdn_conv_norm folded into the recurrence (where gdn_conv_fold_supported): the raw projection rows
    // qkv [T, ld_qkv ≥ cd], the taps conv_w [cd, K] f32 and the history hist [K − 1, cd], moved on by T rows.
    const float* qkv = nullptr;
    int ld_qkv = 0, K = 0;
    const float* conv_w = nullptr;
    float* hist = nullptr;
};
int gdn_quantize_block(int d, int nv, int blk);
// Whether gdn_recurrent_gated can do gdn_conv_norm's work itself for a's shape (nk, nv, d, K, qblk; sm_90: the
// cluster kernel) and STRATA_CUDA_GDN_CONV_FOLD is not 0. gdn_set_conv_fold(0 / 1 / −1 = the variable) for tests.
bool gdn_conv_fold_supported(const GdnGatedArgs& a);
void gdn_set_conv_fold(int mode);
void gdn_recurrent_gated(cudaStream_t s, const GdnGatedArgs& a, int T, float* S, float* o);

// ---- rope.cu ---- positions pos[t] on the device, or pos0 + t when pos is null.
void rope(cudaStream_t s, float* x, int T, int n_heads, int hd, int n_rot, float theta, const int32_t* pos, int pos0);

// ---- qsa_heads.cu ---- Backend::qsa_heads in one launch, with the bits of deinterleave, rms_norm and rope; false
// (nothing launched) where a head is not a whole number of 16-byte-aligned float4s, longer than 512 or its norm weight
// not one head long: the caller issues the ops one by one.
struct QsaHeadsArgs {
    struct Heads {
        const float* src = nullptr;   // queries: qg [T, n·2·hd]; keys, indexer queries: dst itself
        float* dst = nullptr;         // [T, n·hd]
        const float* norm = nullptr;  // norm_len values
        int n = 0, hd = 0, norm_len = 0;
    };
    Heads q, k, qi;   // qi.n = 0: no indexer queries
    float* gate = nullptr;   // [T, q.n·q.hd]
    const int32_t* pos = nullptr;
    int T = 0, n_rot = 0;
    float eps = 0.0f, theta = 0.0f;
};
bool qsa_heads(cudaStream_t s, const QsaHeadsArgs& a);
// o ⊙= σ(gate), the bits of unary(sigmoid) then mul (elementwise.cu).
void sigmoid_gate(cudaStream_t s, float* o, const float* gate, size_t n);
// Backend::rope_multi: rope's arithmetic with frequency j's position read from row A(j) of pos3 [3, T] (device).
void rope_multi(cudaStream_t s, float* x, int T, int n_heads, int hd, int n_rot, float theta, const int32_t* pos3,
                int sec_h, int sec_w);

// ---- attention.cu ---- cells of query t: cells[off[t] … off[t+1]) on the device; with cells null, the key positions
// 0 … off[t+1] − off[t] − 1 (off on the device), or 0 … n0 + t − 1 when off is null as well.
// chunks: blocks each (query, head) is split over (1 = one block over all its cells, no merge); −1 picks
// attention_chunks(T, nh, the most cells of a query, grouped): max_cells when it is ≥ 0, else n0 + T − 1 when off is
// null, else −1 (unknown). Any max_cells gives correct results (a chunk takes ⌈cells / chunks⌉ cells at least);
// it only sizes the split, so callers that replay one graph pass the same (rounded-up) bound every time.
// grouped: one block per (query, kv head, chunk) with a warp per query head of the group (1), a block of 4 warps per
// (query, head, chunk) (0), or −1: not grouped (grouped when nh / nkv is 2 … 16, the split is used and
// STRATA_CUDA_GROUPED_ATTN=1). STRATA_CUDA_SPLIT_ATTN=0: no split (A/B runs). kv: the format K and V
// are held in (backend/kv_format.h, as scatter_rows / scatter_rows_f16 / scatter_rows_q8 write them; --kv).
void attention(cudaStream_t s, const float* q, const float* K, const float* V, int T, int nh, int nkv, int hd,
               const int32_t* off, const int32_t* cells, int n0, float* o, int chunks = -1, int grouped = -1,
               int max_cells = -1, KvType kv = KvType::f32);
int attention_chunks(int T, int nh, int max_cells, bool grouped);

// ---- kv_write.cu ---- cache writes at positions on the device (pos [T] int32), one graph for every position.
// dst[pos[t]·width + j] = src[t·width + j] (Backend::scatter_rows).
void scatter_rows(cudaStream_t s, float* dst, const float* src, int T, int width, const int32_t* pos);
// scatter_rows into an fp16 cache: dst[pos[t]·width + j] = fp16(src[t·width + j]), rounded to nearest even.
void scatter_rows_f16(cudaStream_t s, uint16_t* dst, const float* src, int T, int width, const int32_t* pos);
// Rows in the q8 format of backend/kv_format.h (row stride kv_row_floats(q8, width) floats; --kv q8).
void scatter_rows_q8(cudaStream_t s, uint8_t* dst, const float* src, int T, int width, const int32_t* pos);
// Backend::pool_key_blocks: for each t with (pos[t] + 1) % cr == 0, b = (pos[t] + 1) / cr − 1, kblock row b = RoPE at
// position b·cr (rope's arithmetic, first n_rot dims) of the offset-folded RMSNorm (rms_norm's arithmetic for one
// group of di, weight norm[j % norm_len], norm null: none) of the mean of kraw rows b·cr … b·cr + cr − 1 (mean_rows'
// arithmetic); so the same bits as those three kernels in turn. Other t write nothing. di ≤ 4096.
void pool_key_blocks(cudaStream_t s, const float* kraw, float* kblock, const int32_t* pos, int T, int cr, int di,
                     const float* norm, int norm_len, float eps, int n_rot, float theta);

// ---- indexer_scores.cu ---- one query's scores of nb blocks; di <= 256, ni·di <= 8192.
void indexer_scores(cudaStream_t s, const float* q, const float* kb, int nb, int ni, int di, float scale, float* out);
// Backend::indexer_scores: T queries at positions pos[t] (device) in one launch sized by the row stride (not by the
// positions, so it can be replayed in a graph): out[t·stride + b] for b < min((pos[t] + 1) / cr, stride).
void indexer_scores_rows(cudaStream_t s, const float* q, const float* kb, int T, const int32_t* pos, int cr, int ni,
                         int di, float scale, float* out, int stride);

}  // namespace strata::cuda
