// The CPU backend: the reference implementation of every Backend op (plain f32 loops), with matrix products
// through the block-format dot products of quant/ and work split across a ThreadPool by output rows.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <unordered_map>

#include "backend/backend.h"
#include "backend/cpu/op_profile.h"
#include "backend/cpu/thread_pool.h"
#include "experts/routing_profile.h"

namespace strata {

class CpuBackend : public Backend {
public:
    // f32_activations: multiply dequantized weight rows with f32 activations instead of quantizing activations
    // (slow; a reference mode that isolates weight decoding from activation rounding in parity tests).
    explicit CpuBackend(int n_threads = 0, bool pin = false, bool f32_activations = false);
    const char* name() const override { return "cpu"; }
    int n_threads() const { return pool_.size(); }
    ThreadPool& pool() { return pool_; }
    // --routing-profile-out on the CPU: counts the routed experts of every MoE call (layers numbered as the CUDA
    // path numbers them: MoE layers in order); save_routing_profile() writes them. Call before loading the model.
    void record_routing(const std::string& path) { routing_out_path_ = path; }
    void save_routing_profile() const;
    void prepare_weights(const ModelWeights& w) override;

    float* alloc(size_t n) override;
    void release(float* p) override;
    MemoryUse memory_use() const override;
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
    void causal_conv(const float* x, int T, int C, const Weight& w, int K, int dil, float* hist, float* y) override;
    void gdn_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta, int T,
                       int nk, int nv, int dk, int dv, float* S, float* o) override;
    void rope(float* x, int T, int n_heads, int hd, int n_rot, float theta, const int32_t* pos) override;
    void rope_multi(float* x, int T, int n_heads, int hd, int n_rot, float theta, const int32_t* pos3, int sec_h,
                    int sec_w) override;
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

private:
    // y[r] = row r of W · x for r in [r0, r1): W of any block format, x one f32 row. In the normal mode x is
    // quantized to the weight type's activation format first (act holds that, prepared by prepare_act).
    void rows_dot(GgmlType type, int64_t n, const uint8_t* w, size_t row_bytes, int64_t r0, int64_t r1,
                  const float* x, const void* act, float* y);
    std::vector<uint8_t> prepare_act(GgmlType type, const float* x, int64_t n);
    ThreadPool pool_;
    bool f32_activations_;
    OpProfile profile_;
    std::string routing_out_path_;
    std::unique_ptr<RoutingProfile> routing_out_;
    std::unordered_map<const void*, int> moe_layer_by_data_;
    std::atomic<int64_t> alloc_live_{0}, alloc_peak_{0};   // bytes handed out by alloc() (memory_use)
};

// Reads a small weight (norm vector, bias, conv taps) as f32, whatever its stored type.
std::vector<float> weight_to_f32(const Weight& w);

}  // namespace strata
