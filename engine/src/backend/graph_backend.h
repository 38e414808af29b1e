// GraphBackend: a Backend over another one that offers GraphCapture (a GPU backend). Between begin_graph and
// end_graph it issues nothing at once: it records each op (a closure) and a signature of the op and every argument
// but the uploaded host data. At the end of the run (end_graph, before an op that must run directly, or at a split
// point: a pass goes out in pieces, see split_at_) it looks the signature up: a graph captured earlier from the
// same signature is launched again with this run's upload data; otherwise the recorded ops are captured into a new
// graph, which runs. The host then spends per decode step about what recording costs instead of ~800 kernel
// launches.
//
// Why a replay equals issuing the ops: the signature holds every op with all its arguments (device addresses,
// sizes, weights, scalars), so the same signature means the same kernels on the same memory; what differs between
// runs is only (a) device memory contents and (b) host data, which reaches the device only through to_device and
// is refilled into the graph's upload slots before each launch. Scratch the ops take inside a capture belongs to
// that graph alone (GraphCapture). Ops that need the host mid-run (to_host, host keep-lists, the expert cache's MoE)
// end the run so far and run directly; the QSA selection reads its positions from memory, so it is recorded too.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/graph_capture.h"

namespace strata {

class GraphBackend : public Backend {
public:
    explicit GraphBackend(std::unique_ptr<Backend> inner);
    ~GraphBackend() override;
    GraphBackend(const GraphBackend&) = delete;
    GraphBackend& operator=(const GraphBackend&) = delete;

    Backend& inner() { return *inner_; }
    struct Counts {
        int64_t launches = 0;      // runs whose signature was seen before (replayed from its graph)
        int64_t captures = 0;      // runs captured into a new graph (each ran once as it was captured)
        int64_t unrepeatable = 0;  // of those, graphs that could not be kept
        int64_t direct_ops = 0;    // ops inside recorded passes that ran directly
    };
    Counts counts() const { return counts_; }
    size_t cached_graphs() const { return execs_.size(); }
    // STRATA_GRAPH_SPLIT's value: "32,192" or "32:192" -> {32, 192}; "0" or "": one piece a pass.
    static std::vector<size_t> parse_split(const std::string& spec);

    const char* name() const override { return inner_->name(); }
    void prepare_weights(const ModelWeights& w) override;
    void prepare_weights_extra(const LayerWeights& block, const NextnWeights& nextn) override;
    ExpertCacheCounts expert_cache_counts() const override { return inner_->expert_cache_counts(); }
    std::vector<std::pair<std::string, std::string>> info() const override;
    bool begin_graph() override;
    void end_graph() override;
    void flush_recorded() override;   // the run so far goes out as a piece of its own
    void synchronize() override { inner_->synchronize(); }

    // Memory taken while recording comes from an arena of its own, handed out in order from the start at every
    // begin_graph (so passes of one shape see the same addresses and their signatures repeat) and never released
    // one block at a time: a pass's scratch lives until the next pass begins. Other memory released while recording
    // goes back when the run is flushed (the recorded ops still use it).
    float* alloc(size_t n) override;
    void release(float* p) override;
    MemoryUse memory_use() const override { return inner_->memory_use(); }
    void reset_memory_peak() override { inner_->reset_memory_peak(); }
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
    void hyper_read(const HyperWeights& w, const float* X, int T, int n, int H, float eps, float* u, float* inj) override;
    void hyper_inject_read(float* X, const float* inj_prev, const float* y, const HyperWeights& w, int T, int n, int H,
                           float eps, float* u, float* inj) override;
    void causal_conv(const float* x, int T, int C, const Weight& w, int K, int dil, float* hist, float* y) override;
    void gdn_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta, int T,
                       int nk, int nv, int dk, int dv, float* S, float* o) override;
    void gdn_block(const GdnWeights& w, const GdnShape& s, const float* u, int T, float* conv_hist, float* S,
                   float* y, GdnProjections keep = {}) override;
    void rope(float* x, int T, int n_heads, int hd, int n_rot, float theta, const int32_t* pos) override;
    void qsa_heads(const float* qg, float* q, float* gate, float* k, float* qi, const Weight& q_norm,
                   const Weight& k_norm, const Weight* qi_norm, int T, int nh, int nkv, int hd, int ni, int di, float eps,
                   int n_rot, float theta, const int32_t* pos) override;
    void sigmoid_gate(float* o, float* gate, size_t n) override;
    void rope_multi(float* x, int T, int n_heads, int hd, int n_rot, float theta, const int32_t* pos3, int sec_h,
                    int sec_w) override;
    void scatter_rows(float* dst, const float* src, int T, int width, const int32_t* pos) override;
    void write_kv(float* cache, const float* src, int T, int width, const int32_t* pos) override;
    void set_kv_type(KvType t) override {
        Backend::set_kv_type(t);
        inner_->set_kv_type(t);
    }
    void pool_key_blocks(const float* kraw, float* kblock, const int32_t* pos, int T, int cr, int di,
                         const Weight& norm, float eps, int n_rot, float theta) override;
    void attention(const float* q, const float* K, const float* V, int T, int nh, int nkv, int hd,
                   const std::vector<std::vector<int32_t>>& keep, float* o) override;
    void select_cells(const float* scores, int stride, int T, const int32_t* pos, int cr, int kb, const int32_t* off,
                      int32_t* cells) override;
    void attention_cells(const float* q, const float* K, const float* V, int T, int nh, int nkv, int hd,
                         const int32_t* off, const int32_t* cells, int max_cells, float* o) override;
    void indexer_scores(const float* q, const float* kb, int T, const int32_t* pos, int cr, int ni, int di,
                        float scale, float* s, int stride) override;
    void route_topk(const float* logits, int T, int E, int k, int32_t* ids, float* weights) override;
    void moe_experts(const MoeWeights& w, const float* x, int T, int k, const int32_t* ids, const float* weights,
                     float* y) override;
    void shared_expert(const MoeWeights& w, const float* u, int T, float* y) override;
    void moe_experts_with_shared(const MoeWeights& w, const float* x, int T, int k, const int32_t* ids,
                                 const float* weights, float* y) override;

private:
    // The signature of a recorded run: op codes and arguments as 64-bit words, with a running hash.
    struct Signature {
        std::vector<uint64_t> words;
        uint64_t hash = 1469598103934665603ull;
        void add(uint64_t v) {
            words.push_back(v);
            hash = (hash ^ v) * 1099511628211ull;
        }
        void clear() {
            words.clear();
            hash = 1469598103934665603ull;
        }
    };
    struct Entry {
        std::vector<uint64_t> words;
        GraphCapture::Exec exec = nullptr;   // null: the run cannot be replayed; its ops are issued directly
        uint64_t last_use = 0;
    };

    // Records op `code` with its arguments (signed) and the closure that issues it; issues it at once when not
    // recording.
    template <class... A>
    void record(int code, std::function<void()> issue, const A&... args);
    void sign(const void* p) { sig_.add((uint64_t)(uintptr_t)p); }
    void sign(const Weight& w);
    void sign(int v) { sig_.add((uint64_t)(uint32_t)v); }
    void sign(size_t v) { sig_.add((uint64_t)v); }
    void sign(float v);
    void sign(Unary f) { sig_.add((uint64_t)f); }
    void sign(const GdnShape& s);
    // Issues an op that must not be inside a graph: the run recorded so far goes first.
    void direct(const std::function<void()>& issue);
    void flush();        // replays or captures the recorded run
    void clear_graphs();

    std::unique_ptr<Backend> inner_;
    GraphCapture* cap_;
    bool recording_ = false;
    bool moe_direct_ = false;   // the last moe_experts ran outside the recording (its shared_expert does too)
    Signature sig_;
    std::vector<std::function<void()>> ops_;
    std::vector<uint8_t> upload_bytes_;                  // this run's to_device data, back to back
    std::vector<std::pair<size_t, size_t>> uploads_;     // (offset in upload_bytes_, bytes)
    std::vector<float*> released_;                       // released while recording, returned at the flush
    struct Chunk {
        float* p;
        size_t n;     // floats
    };
    std::vector<Chunk> arena_;                           // from the inner backend, kept until the destructor
    size_t arena_chunk_ = 0, arena_used_ = 0;            // where the next allocation goes
    bool in_arena(const float* p) const;
    void give_back(float* p);                            // to the inner backend unless it is arena memory
    std::unordered_multimap<uint64_t, Entry> execs_;     // by signature hash
    uint64_t uses_ = 0;
    Counts counts_;
    // STRATA_GRAPH_TIMING=1: the host's time a replayed run (a piece of a pass, below), logged as means every 256
    // replays: recording (from begin_graph or the last piece's launch to the flush: the model's host code and the ops'
    // closures and signatures), the flush up to the launch call, the launch call itself (refilled uploads and
    // cudaGraphLaunch), and the ops recorded a run.
    struct Timing {
        bool on = false;
        int64_t begin_ns = 0;
        int64_t runs = 0, ops = 0;
        double record_us = 0, lookup_us = 0, launch_us = 0;
        int64_t firsts = 0;                  // first pieces of passes, and their own record and launch times
        double first_record_us = 0, first_launch_us = 0;
        bool first_of_pass = false;
    } timing_;
    int64_t flush_start_ns_ = 0;
    void note_timing(int64_t t_lookup, int64_t t_launched);
    // A pass is launched in pieces: the run so far is flushed (replayed or captured as a graph of its own) when it
    // reaches split_at_[k] ops, k counting the pieces of the pass. The GPU starts on the first piece while the host
    // records and launches the rest, instead of idling through the whole pass's recording and its launch call
    // (~100 + ~100 µs for ~640 ops on the H200 host). STRATA_GRAPH_SPLIT="32,192" (the default; "0": one piece;
    // colons may stand for the commas).
    std::vector<size_t> split_at_;
    size_t piece_ = 0, pass_ops_ = 0;
};

}  // namespace strata
