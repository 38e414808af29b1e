// The operations the model is written in. Activations are f32 arrays of rows (row-major [rows, width]); pointers
// name memory of the backend's device. Weights are views of file data (any block format). The CPU backend is the
// reference; a CUDA backend implements the same list. Each comment gives the formula and the shapes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backend/kv_format.h"

#include "model/weights.h"

namespace strata {

enum class Unary { silu, sigmoid, softplus, exp };

class GraphCapture;     // backend/graph_capture.h

// A verify pass's input projections of a GDN layer (q, k, v, β, α and the output gate), kept for the replay after
// a rejection so that it reruns only the conv and the recurrence: proj holds gdn_projection_floats(s, tokens)
// floats in the backend's memory, laid out as the backend likes for `tokens` rows (the same for a recording call
// and its replay; T ≤ tokens). record: this call writes its T tokens' projections there; otherwise it takes the
// first T from there, ignores u and advances the state only (y null). proj null: neither.
struct GdnProjections {
    float* proj = nullptr;
    int tokens = 0;
    bool record = true;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual const char* name() const = 0;
    // Called once after the weights are bound: a GPU backend uploads (or pins) what it will read.
    virtual void prepare_weights(const ModelWeights& w) {}
    // The same for the MTP head's block and nextn tensors (loaded from their own file).
    virtual void prepare_weights_extra(const LayerWeights& block, const NextnWeights& nextn) {}
    // Expert-cache hits and look-ups since start (a GPU backend with an expert cache; zero otherwise).
    struct ExpertCacheCounts {
        int64_t hits = 0, lookups = 0;
        // The hybrid path's split (CUDA with --expert-cache): pairs and expert bytes the CPU pool computed and read,
        // its wall time, the GPU's idle time waiting for it, expert bytes copied over PCIe for prompt chunks.
        int64_t cpu_pairs = 0, cpu_bytes = 0, pcie_bytes = 0;
        double cpu_ms = 0, gpu_wait_ms = 0;
    };
    virtual ExpertCacheCounts expert_cache_counts() const { return {}; }
    // (key, value) lines for the serve protocol's INFO describing the backend's memory tiers (may be empty).
    virtual std::vector<std::pair<std::string, std::string>> info() const { return {}; }

    // The element format of the QSA key and value caches (Session's k_cache / v_cache; backend/kv_format.h, --kv):
    // written by write_kv and read by attention_cells in that format; everything else stays f32. Set before any
    // Session exists.
    virtual void set_kv_type(KvType t) { kv_type_ = t; }
    KvType kv_type() const { return kv_type_; }

    // A backend may record the ops issued between begin_graph() and end_graph() and run them as one graph (a GPU
    // backend's decode step: backend/graph_backend.h); begin_graph returns whether it records. The caller must not
    // need results on the host in between (to_host still works: the ops recorded so far run first).
    virtual bool begin_graph() { return false; }
    virtual void end_graph() {}
    // Inside a recorded pass: issue the ops recorded so far now (the host is about to wait for something else, e.g.
    // the PLE rows). Backends that issue every op at once do nothing.
    virtual void flush_recorded() {}
    // Waits until every op issued so far has finished (outside recorded passes). Backends that finish each op before
    // returning do nothing.
    virtual void synchronize() {}
    // What GraphBackend needs to capture this backend's ops into replayable graphs; null when it cannot.
    virtual GraphCapture* graph_capture() { return nullptr; }

    // Memory of the backend's device, in floats.
    virtual float* alloc(size_t n) = 0;
    virtual void release(float* p) = 0;
    // Bytes taken through alloc() (on CUDA also the ops' own scratch; not the weights, not captured graphs' own
    // scratch): held now, the most held since reset_memory_peak(), and what the backend keeps reserved for them (a
    // caching pool's blocks, free ones included). What a prompt chunk's activations need: `strata generate` prints it.
    // -1: not counted by this backend.
    struct MemoryUse {
        int64_t live = -1, peak = -1, reserved = -1;
    };
    virtual MemoryUse memory_use() const { return {}; }
    virtual void reset_memory_peak() {}
    virtual void to_device(float* dst, const float* host, size_t n) = 0;
    virtual void to_host(float* host, const float* src, size_t n) = 0;
    virtual void fill(float* x, float value, size_t n) = 0;
    virtual void copy(float* dst, const float* src, size_t n) = 0;
    // out[r] = the greedy choice of row r of x [rows, n]: the first largest value, NaN skipped (common/argmax.h).
    // out: int32 values in the backend's memory (a float buffer of `rows` entries; to_host copies them bit for bit).
    virtual void argmax_rows(const float* x, int rows, int n, int32_t* out) = 0;

    // y[t] = table row ids[t] (dequantized). table {H, V}; ids in the backend's memory (int32 values, checked by the
    // caller to lie in 0 … V − 1).
    virtual void embed(const Weight& table, const int32_t* ids, int T, float* y) = 0;
    // y[t, o] = Σ_i W[o, i] x[t, i]. W {in, out} (row o has `in` elements); x [T, in]; y [T, out].
    virtual void matmul(const Weight& w, const float* x, int T, float* y) = 0;
    // Offset-folded RMSNorm over groups of `group` columns: y = x · rsqrt(mean(x²) + eps) · w[col % w_len].
    // w may be null (no weight). x, y [rows, width]; width % group == 0.
    virtual void rms_norm(const float* x, const Weight* w, int rows, int width, int group, float eps, float* y) = 0;
    // L2 norm over groups: y = x · rsqrt(Σ x² + eps) · scale.
    virtual void l2_norm(const float* x, int rows, int width, int group, float eps, float scale, float* y) = 0;
    // y = f(x · scale) elementwise.
    virtual void unary(Unary f, const float* x, size_t n, float scale, float* y) = 0;
    // y = a ⊙ b.
    virtual void mul(const float* a, const float* b, size_t n, float* y) = 0;
    // y += x.
    virtual void add(float* y, const float* x, size_t n) = 0;
    // x *= s.
    virtual void scale(float* x, size_t n, float s) = 0;
    // x[t, j] += v[j] (add_row) or x[t, j] *= v[j] (mul_row); v {width}.
    virtual void add_row(float* x, int T, int width, const Weight& v) = 0;
    virtual void mul_row(float* x, int T, int width, const Weight& v) = 0;
    // y[t, :] = x[t, c0 : c0 + nc] for x [T, width].
    virtual void slice_cols(const float* x, int T, int width, int c0, int nc, float* y) = 0;
    // y[r] = [a[r] | b[r]] for a [rows, wa], b [rows, wb].
    virtual void concat_cols(const float* a, const float* b, int rows, int wa, int wb, float* y) = 0;
    // Per head h of x [T, n_heads·(la + lb)]: a[t, h] = first la values, b[t, h] = the next lb.
    virtual void deinterleave(const float* x, int T, int n_heads, int la, int lb, float* a, float* b) = 0;
    // y[j] = mean over rows of x[r, j]; x [rows, width].
    virtual void mean_rows(const float* x, int rows, int width, float* y) = 0;
    // X[t, s·H + j] = e[t, j] for every stream s.
    virtual void repeat_streams(const float* e, int T, int n, int H, float* X) = 0;
    // PLE gate: γ_s = <K_s, Q_s>/√H, γ ← sign(γ)·√max(|γ|, 1e-6); gv[t, s·H + j] = σ(γ_s) · v[t, j].
    // gv may be K or Q: each (t, s) row is read whole before that row of gv is written.
    virtual void ple_gate(const float* K, const float* Q, const float* v, int T, int n, int H, float* gv) = 0;
    // Hyper-connection read, after the norm and the mix weights: u[t] = (1/n) Σ_s m[t, s·H + j] · xn[t, s·H + j].
    virtual void hyper_mix(const float* xn, const float* m, int T, int n, int H, float* u) = 0;
    // Hyper-connection write: X[t, s·H + j] += inj[t, s] · y[t, j].
    virtual void hyper_inject(float* X, const float* inj, const float* y, int T, int n, int H) = 0;
    // The whole hyper-connection read (MODEL.md §5): xn = grouped RMSNorm (groups of H, weight w.norm) of X [T, n·H];
    // a = silu(xn W_down / n) [T, r]; m = σ(a W_up) [T, n·H]; u [T, H] = hyper_mix(xn, m); inj [T, n] = 2σ(xn W_inj / n)
    // when inj is not null. The default (model/block_hyper.cpp) issues exactly those primitive ops; a GPU backend may
    // fuse them.
    virtual void hyper_read(const HyperWeights& w, const float* X, int T, int n, int H, float eps, float* u, float* inj);
    // hyper_inject(X, inj_prev, y) then hyper_read(w, X, …, u, inj): one sub-block's output written into the streams
    // and the next sub-block's input read from them. inj_prev may be inj. The default (model/block_hyper.cpp) issues
    // the two ops; a GPU backend may fold the injection into the read.
    virtual void hyper_inject_read(float* X, const float* inj_prev, const float* y, const HyperWeights& w, int T, int n,
                                   int H, float eps, float* u, float* inj);

    // Causal depthwise conv over time with a carried history. x [T, C]; hist [(K−1)·dil, C] holds the previous
    // inputs (oldest first) and is updated; w {K, C}: y[t, c] = Σ_j w[c, j] · x[t − (K−1−j)·dil, c].
    virtual void causal_conv(const float* x, int T, int C, const Weight& w, int K, int dil, float* hist, float* y) = 0;
    // Gated DeltaNet recurrence, token by token (fp32 state S [nv, dk, dv]); value head p uses key head p % nk.
    // q, k [T, nk·dk] (already normalised/scaled), v [T, nv·dv], g, beta [T, nv]; o [T, nv·dv].
    virtual void gdn_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta,
                               int T, int nk, int nv, int dk, int dv, float* S, float* o) = 0;
    // The Gated DeltaNet mixer (MODEL.md §7): y [T, H] from u [T, H] with nk key heads and nv value heads of dimension
    // d (dk = dv), conv kernel K; updates conv_hist [K−1, 2·nk·d + nv·d] and the state S [nv, d, d]. The default
    // (model/block_gdn.cpp) issues the primitive ops (four projections, conv, silu, split, l2 norms, gates, recurrence,
    // gated RMSNorm, out projection); a GPU backend may fuse them. y null: only conv_hist and S are advanced (a
    // speculation replay), the output gate and out projection are skipped.
    struct GdnShape {
        int nk = 0, nv = 0, d = 0, conv_kernel = 0;
        float rms_eps = 0.0f;
    };
    using GdnProjections = strata::GdnProjections;
    static size_t gdn_projection_floats(const GdnShape& s, int tokens) {
        return (size_t)tokens * (2 * (size_t)s.nk * s.d + 2 * (size_t)s.nv * s.d + 2 * (size_t)s.nv);   // qkv, z, β, α
    }
    virtual void gdn_block(const GdnWeights& w, const GdnShape& s, const float* u, int T, float* conv_hist, float* S,
                           float* y, GdnProjections keep = {});
    // RoPE (NeoX halves) on the first n_rot dims of each head. x [T, n_heads·hd]; positions pos [T] in the backend's
    // memory (int32 values).
    virtual void rope(float* x, int T, int n_heads, int hd, int n_rot, float theta, const int32_t* pos) = 0;
    // Multimodal RoPE (MODEL.md §4, interleaved M-RoPE): as rope, but frequency j < n_rot/2 takes its position from
    // axis A(j) of pos3 [3, T] (row 0 t, row 1 h, row 2 w; int32 values in the backend's memory): A(j) = h when
    // j % 3 == 1 and j < 3·sec_h, w when j % 3 == 2 and j < 3·sec_w, else t (rope.dimension_sections [t, h, w, _];
    // the t section is never read). With the three rows equal it computes rope's values bit for bit.
    virtual void rope_multi(float* x, int T, int n_heads, int hd, int n_rot, float theta, const int32_t* pos3, int sec_h,
                            int sec_w) = 0;
    // QSA's heads before attention, at text positions (MODEL.md §8): per head of qg [T, nh·2·hd] ([hd query | hd
    // gate]) the query goes to q [T, nh·hd] and the gate to gate [T, nh·hd]; then q, k [T, nkv·hd] and, with qi_norm
    // not null, the indexer's queries qi [T, ni·di] (both in place) are RMS-normed per head (weights q_norm, k_norm,
    // qi_norm) and rotated (rope, pos in the backend's memory). The default (model/block_qsa.cpp) issues deinterleave,
    // rms_norm and rope in that order; a GPU backend may fuse them, with the same values.
    virtual void qsa_heads(const float* qg, float* q, float* gate, float* k, float* qi, const Weight& q_norm,
                           const Weight& k_norm, const Weight* qi_norm, int T, int nh, int nkv, int hd, int ni, int di,
                           float eps, int n_rot, float theta, const int32_t* pos);
    // o ⊙= σ(gate) over n values (QSA's output gate); gate is scratch and may be overwritten. The default issues
    // unary(sigmoid) into gate, then mul.
    virtual void sigmoid_gate(float* o, float* gate, size_t n);
    // dst[pos[t]·width …] = src[t·width …] for t < T: rows written at positions held in the backend's memory (the
    // KV cache append of a pass whose position is not baked into its graph). src [T, width].
    virtual void scatter_rows(float* dst, const float* src, int T, int width, const int32_t* pos) = 0;
    // scatter_rows into a key or value cache, in the caches' format (kv_type(): rows of kv_row_floats(kv_type(),
    // width) floats, backend/kv_format.h).
    virtual void write_kv(float* cache, const float* src, int T, int width, const int32_t* pos) = 0;
    // QSA block keys for every token t that completes a block ((pos[t] + 1) % cr == 0, b = (pos[t] + 1) / cr − 1):
    // kblock[b] = RoPE_{b·cr}(RMSNorm_norm(mean of kraw rows b·cr … b·cr + cr − 1)); kraw [·, di], kblock [·, di],
    // RoPE on the first n_rot dims of the one head of di. Other tokens write nothing. pos in the backend's memory.
    virtual void pool_key_blocks(const float* kraw, float* kblock, const int32_t* pos, int T, int cr, int di,
                                 const Weight& norm, float eps, int n_rot, float theta) = 0;
    // Softmax attention of T queries at positions pos0.. over cached keys; keep[t] lists (on the host) the key
    // positions query t may see, ascending. q [T, nh·hd]; K, V [P, nkv·hd]; o [T, nh·hd].
    virtual void attention(const float* q, const float* K, const float* V, int T, int nh, int nkv, int hd,
                           const std::vector<std::vector<int32_t>>& keep, float* o) = 0;
    // QSA cell choice, on the device: query t sits at position pos[t] (int32 in the backend's memory) and sees
    // M = pos[t] + 1 keys in nb = M / cr complete blocks (nb ≤ stride). With nb > kb, its cells are the kb blocks
    // torch.topk picks from scores[t·stride …] (ties as model/topk.h) in ascending order, each as its cr key
    // positions, then the tail nb·cr … M − 1; otherwise 0 … M − 1. Query t's cells go to cells[off[t] …]; off [T + 1]
    // int32 in the backend's memory, from the host's count. Positions come from memory, not arguments, so a decode
    // pass's graph repeats from token to token.
    virtual void select_cells(const float* scores, int stride, int T, const int32_t* pos, int cr, int kb,
                              const int32_t* off, int32_t* cells) = 0;
    // attention over device cell lists (K and V: caches in the kv_type() format, written by write_kv): query t sees
    // cells[off[t] … off[t + 1]) (ascending key positions), or, with
    // cells null, the key positions 0 … off[t + 1] − off[t] − 1. max_cells: no query sees more cells (−1: unknown);
    // a backend may size its work by it, so callers round it up to keep it the same over many passes.
    virtual void attention_cells(const float* q, const float* K, const float* V, int T, int nh, int nkv, int hd,
                                 const int32_t* off, const int32_t* cells, int max_cells, float* o) = 0;
    // Dot products for the indexer of T queries: query t, at position pos[t] (int32 in the backend's memory), scores
    // its nb = (pos[t] + 1) / cr complete blocks: s[t·stride + b] = scale · Σ_h relu(q_t,h · kb[b]) for b < nb ≤ stride
    // (the rest of the row is not written). q [T, ni·di], kb [nb, di].
    virtual void indexer_scores(const float* q, const float* kb, int T, const int32_t* pos, int cr, int ni, int di,
                                float scale, float* s, int stride) = 0;
    // Router: p = softmax(logits[t]) over all E experts; ids[t, :] = the k experts torch.topk picks from p (its
    // choice among exact ties: model/topk.h), weights[t, j] = p_ids[t,j] / Σ_j p_ids[t,j]. logits [T, E];
    // ids, weights [T, k] in the backend's memory (ids are int32 values in memory from alloc()).
    virtual void route_topk(const float* logits, int T, int E, int k, int32_t* ids, float* weights) = 0;
    // y[t] = Σ_j w[t, j] · experts_j(x[t]) for the routed experts ids[t, j]; ids and weights in the backend's
    // memory (as route_topk writes them). SwiGLU experts from 3-D tensors.
    virtual void moe_experts(const MoeWeights& w, const float* x, int T, int k, const int32_t* ids,
                             const float* weights, float* y) = 0;
    // The shared expert added to y: y[t] += σ(u[t] · shexp_gate_inp) · down(silu(gate · u[t]) ⊙ (up · u[t])).
    // u [T, H], y [T, H]. The default (model/block_moe.cpp) issues exactly those primitive ops; a GPU backend may
    // fuse them.
    virtual void shared_expert(const MoeWeights& w, const float* u, int T, float* y);
    // The MoE block's experts: moe_experts into y, then shared_expert added. The default issues exactly those two ops;
    // a GPU backend may compute both in the same launches (another order of additions: the same rounding, not
    // necessarily the same bits).
    virtual void moe_experts_with_shared(const MoeWeights& w, const float* x, int T, int k, const int32_t* ids,
                                         const float* weights, float* y);

private:
    KvType kv_type_ = KvType::f32;
};

}  // namespace strata
