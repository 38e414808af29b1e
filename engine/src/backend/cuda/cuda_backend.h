// The CUDA backend: every Backend op on one GPU and one stream. prepare_weights uploads every weight once in its
// stored block format (cudaMalloc, never managed memory); activations live in device memory from a caching pool.
// With an expert cache, routed experts are uploaded only into its slots (hybrid_moe.h).
// Plain C++ header (no CUDA headers), so the CLI can create the backend through make_cuda_backend().
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/graph_capture.h"
#include "experts/gpu_options.h"

namespace strata {

class CudaBackend : public Backend, public GraphCapture {
public:
    // f32_activations: block-format weights multiply f32 activations (the CPU's --f32-activations reference mode)
    // instead of activations quantized to Q8_0 / Q8_K as the CPU path does by default.
    explicit CudaBackend(int device = 0, bool f32_activations = false);
    // With opt.expert_cache set, routed experts stay in host memory and an expert cache holds some on the GPU; the
    // CPU computes the others (backend/cuda/hybrid_moe.h).
    CudaBackend(int device, const GpuOptions& opt);
    ~CudaBackend() override;
    CudaBackend(const CudaBackend&) = delete;
    CudaBackend& operator=(const CudaBackend&) = delete;

    const char* name() const override { return "cuda"; }
    void prepare_weights(const ModelWeights& w) override;
    void prepare_weights_extra(const LayerWeights& block, const NextnWeights& nextn) override;
    // Uploads one weight (no-op when its data is already on the device); prepare_weights calls it for each.
    void upload_weight(const Weight& w);
    // Uploads weights not yet on the device so that consecutive ones of one format and row length sit back to back in
    // one allocation (gdn_block then multiplies them as one matrix); the others one by one.
    void upload_together(std::initializer_list<const Weight*> ws);
    size_t weight_bytes() const;        // device bytes held by uploaded weights
    std::string device_name() const;
    void synchronize() override;        // waits for all queued work (for timing)
    bool begin_graph() override;        // starts the profile's pass; the graphs themselves come through GraphBackend
    // GraphCapture (null with STRATA_CUDA_PROFILE=1, STRATA_CUDA_SYNC=1 or STRATA_CUDA_GRAPHS=0).
    GraphCapture* graph_capture() override;
    void capture_begin(size_t upload_bytes) override;
    Exec capture_end() override;
    bool launch(Exec exec, const std::vector<Upload>& uploads) override;
    void destroy(Exec exec) override;
    bool moe_on_host(int T, int k) const override;
    ExpertCacheCounts expert_cache_counts() const override;
    std::vector<std::pair<std::string, std::string>> info() const override;

    float* alloc(size_t n) override;
    void release(float* p) override;
    MemoryUse memory_use() const override;   // the main scratch pool (prompt chunks; decode graphs hold their own)
    void reset_memory_peak() override;
    void to_device(float* dst, const float* host, size_t n) override;
    void to_host(float* host, const float* src, size_t n) override;
    void fill(float* x, float value, size_t n) override;
    void argmax_rows(const float* x, int rows, int n, int32_t* out) override;
    void copy(float* dst, const float* src, size_t n) override;

    void embed(const Weight& table, const int32_t* ids, int T, float* y) override;
    void matmul(const Weight& w, const float* x, int T, float* y) override;
    void rms_norm(const float* x, const Weight* w, int rows, int width, int group, float eps, float* y) override;
    void l2_norm(const float* x, int rows, int width, int group, float eps, float scale, float* y) override;
    void unary(Unary f, const float* x, size_t n, float scale, float* y) override;
    void mul(const float* a, const float* b, size_t n, float* y) override;
    void add(float* y, const float* x, size_t n) override;
    void scale(float* x, size_t n, float s) override;
    void add_row(float* x, int T, int width, const Weight& v) override;
    void mul_row(float* x, int T, int width, const Weight& v) override;
    void slice_cols(const float* x, int T, int width, int c0, int nc, float* y) override;
    void concat_cols(const float* a, const float* b, int rows, int wa, int wb, float* y) override;
    void deinterleave(const float* x, int T, int n_heads, int la, int lb, float* a, float* b) override;
    void mean_rows(const float* x, int rows, int width, float* y) override;
    void repeat_streams(const float* e, int T, int n, int H, float* X) override;
    void ple_gate(const float* K, const float* Q, const float* v, int T, int n, int H, float* gv) override;
    void hyper_mix(const float* xn, const float* m, int T, int n, int H, float* u) override;
    void hyper_inject(float* X, const float* inj, const float* y, int T, int n, int H) override;
    // Three kernels (kernels/hyper_read.cu) where the shapes and formats allow; the primitive ops otherwise.
    void hyper_read(const HyperWeights& w, const float* X, int T, int n, int H, float eps, float* u, float* inj) override;
    // The injection folded into the read's first kernel where the two-kernel path runs.
    void hyper_inject_read(float* X, const float* inj_prev, const float* y, const HyperWeights& w, int T, int n, int H,
                           float eps, float* u, float* inj) override;
    static int64_t fused_hyper_reads();   // hyper_read calls (all CUDA backends) that took the three-kernel path
    static int64_t folded_injections();   // hyper_inject_read calls (all CUDA backends) that folded the injection
    static int64_t q6k_t1_matmuls();      // Q6_K one-row matmuls (the head) that took their staged kernel
    static int64_t t1_staged_matmuls();   // one-row matmuls of many rows that took matmul_q8_staged_kernel
    // Prompt-sized matmuls on the tensor-core kernels (kernels/matmul_mmq.cuh): on (1; 2: without super-block integer
    // sums), off (0) or per STRATA_CUDA_MMQ (−1) for later calls, the tests' switch; and how many launched since start
    // (all CUDA backends).
    static void set_prompt_mmq(int mode);
    static int64_t prompt_mmq_matmuls();
    // gdn_block's conv folded into the recurrence kernel where it fits (1), never (0) or per STRATA_CUDA_GDN_CONV_FOLD
    // (−1) for later calls: the tests' switch.
    static void set_gdn_conv_fold(int mode);
    static int64_t gdn_conv_folds();   // gdn_block calls (all CUDA backends) whose recurrence kernel did the conv
    void causal_conv(const float* x, int T, int C, const Weight& w, int K, int dil, float* hist, float* y) override;
    void gdn_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta, int T,
                       int nk, int nv, int dk, int dv, float* S, float* o) override;
    // Two kernels between the projections (kernels/gdn_fused.cu): conv + silu + q/k l2 norms, then the recurrence
    // with its gates and the gated RMSNorm (one kernel where the recurrence's clusters also do the conv: sm_90,
    // d = 128; STRATA_CUDA_GDN_CONV_FOLD=0 off), which also quantizes o for the out projection where the activation block
    // fits (Q8_0 for d % 32 == 0, Q8_K for d = 128; STRATA_CUDA_GDN_QUANT=0 turns that off). The input projections
    // share one activation quantization, and run as one matmul per run of weights uploaded together. The primitive
    // ops with STRATA_CUDA_FUSED_GDN=0 or shapes the kernels do not take.
    void gdn_block(const GdnWeights& w, const GdnShape& s, const float* u, int T, float* conv_hist, float* S,
                   float* y, GdnProjections keep = {}) override;
    static int64_t fused_gdn_blocks();        // gdn_block calls (all CUDA backends) that took the fused path
    static int64_t gdn_quantized_outputs();   // of those, calls whose recurrence kernel quantized o
    void rope(float* x, int T, int n_heads, int hd, int n_rot, float theta, const int32_t* pos) override;
    void rope_multi(float* x, int T, int n_heads, int hd, int n_rot, float theta, const int32_t* pos3, int sec_h,
                    int sec_w) override;
    // One launch (kernels/qsa_heads.cu) where the shapes allow and STRATA_CUDA_QSA_HEADS is not 0; the ops otherwise.
    void qsa_heads(const float* qg, float* q, float* gate, float* k, float* qi, const Weight& q_norm,
                   const Weight& k_norm, const Weight* qi_norm, int T, int nh, int nkv, int hd, int ni, int di, float eps,
                   int n_rot, float theta, const int32_t* pos) override;
    void sigmoid_gate(float* o, float* gate, size_t n) override;
    static int64_t fused_qsa_heads();   // qsa_heads calls (all CUDA backends) that took the one launch
    void scatter_rows(float* dst, const float* src, int T, int width, const int32_t* pos) override;
    void write_kv(float* cache, const float* src, int T, int width, const int32_t* pos) override;
    void pool_key_blocks(const float* kraw, float* kblock, const int32_t* pos, int T, int cr, int di,
                         const Weight& norm, float eps, int n_rot, float theta) override;
    void attention(const float* q, const float* K, const float* V, int T, int nh, int nkv, int hd,
                   const std::vector<std::vector<int32_t>>& keep, float* o) override;
    void indexer_scores(const float* q, const float* kb, int T, const int32_t* pos, int cr, int ni, int di,
                        float scale, float* s, int stride) override;
    void select_cells(const float* scores, int stride, int T, const int32_t* pos, int cr, int kb, const int32_t* off,
                      int32_t* cells) override;
    void attention_cells(const float* q, const float* K, const float* V, int T, int nh, int nkv, int hd,
                         const int32_t* off, const int32_t* cells, int max_cells, float* o) override;
    void route_topk(const float* logits, int T, int E, int k, int32_t* ids, float* weights) override;
    void moe_experts(const MoeWeights& w, const float* x, int T, int k, const int32_t* ids, const float* weights,
                     float* y) override;
    // Decode-sized T: gate+up+swiglu (moe_gate_up), the down matmul and one kernel for the gate and the add;
    // the primitive ops otherwise (and with STRATA_CUDA_FUSED_MOE=0).
    void shared_expert(const MoeWeights& w, const float* u, int T, float* y) override;
    // One decode token (all experts on the GPU, or the device join): the shared expert as one more pair of the routed
    // experts' two launches (cuda::moe_shexp_decode); the two ops otherwise. STRATA_CUDA_MERGE_SHEXP=0 turns it off.
    void moe_experts_with_shared(const MoeWeights& w, const float* x, int T, int k, const int32_t* ids,
                                 const float* weights, float* y) override;
    static int64_t fused_gate_ups();   // gate+up+swiglu launches as one kernel (moe_gate_up), all CUDA backends

private:
    // shared_expert's work; shared_expert itself adds a device-joined MoE call's CPU share after it.
    void shared_expert_into(const MoeWeights& w, const float* u, int T, float* y);
    bool device_join(int T, int k) const;   // a hybrid MoE call of T × k joins on the device (no host round trip)
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// The factory main() hands to the CLI when the executable is built with CUDA: a CudaBackend inside a GraphBackend
// (short passes replay captured graphs).
std::unique_ptr<Backend> make_cuda_backend(const GpuOptions& opt);

}  // namespace strata
