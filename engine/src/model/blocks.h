// The sub-blocks of qwen4exp, each a straight sequence of backend ops in the order of MODEL.md.
// Shapes: T tokens of this call, H hidden, n streams; X is the wide residual [T, n·H].
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/hparams.h"
#include "model/ple_reader.h"
#include "model/session.h"
#include "model/weights.h"

namespace strata {

// Device scratch memory that is released at the end of the scope.
class Scratch {
public:
    Scratch(Backend& be, size_t n) : be_(be), p_(be.alloc(n)) {}
    ~Scratch() { be_.release(p_); }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    operator float*() const { return p_; }
    float* get() const { return p_; }
private:
    Backend& be_;
    float* p_;
};

static_assert(sizeof(float) == sizeof(int32_t), "int32 values (ids, positions, offsets) travel in float slots");

// Host int32 values into a device buffer of float slots; the buffer as int32 for the ops that read it.
inline const int32_t* upload_ints(Backend& be, const Scratch& dst, const std::vector<int32_t>& v) {
    be.to_device(dst, reinterpret_cast<const float*>(v.data()), v.size());
    return reinterpret_cast<const int32_t*>(dst.get());
}

// Dense attention passes its cell bound rounded up to a multiple of this (Backend::attention_cells).
constexpr int kCellBoundStep = 1024;

// Passes of at most this many tokens (decode steps, speculation's verify passes) may run as one backend graph.
constexpr int kGraphMaxTokens = 8;

// A backend graph over a pass (Backend::begin_graph when `want`): end() runs it; leaving the scope by an exception
// runs what was captured, as directly issued ops would have run.
class GraphScope {
public:
    GraphScope(Backend& be, bool want) : be_(be), active_(want && be.begin_graph()) {}
    ~GraphScope() {
        try {
            end();
        } catch (...) {
        }
    }
    GraphScope(const GraphScope&) = delete;
    GraphScope& operator=(const GraphScope&) = delete;
    void end() {
        if (active_) {
            active_ = false;
            be_.end_graph();
        }
    }
private:
    Backend& be_;
    bool active_;
};

// u [T, H] = stream mix of X; inj [T, n] = 2σ(X̂ W_inj / n) when inj is not null (modules with an inject weight).
void hyper_read(Backend& be, const Hparams& hp, const HyperWeights& w, const float* X, int T, float* u, float* inj);
// X += inj_prev ⊗ y (the last sub-block's output into every stream), then hyper_read of the new X.
void hyper_inject_read(Backend& be, const Hparams& hp, const HyperWeights& w, float* X, const float* inj_prev,
                       const float* y, int T, float* u, float* inj);

// Gated DeltaNet: y [T, H] from u [T, H]; updates the conv history and recurrent state.
Backend::GdnShape gdn_shape(const Hparams& hp);
// keep: the verify pass's projections (Backend::GdnProjections), recorded or replayed.
void gdn_block(Backend& be, const Hparams& hp, const GdnWeights& w, LayerState& st, const float* u, int T, float* y,
               Backend::GdnProjections keep = {});

// M-RoPE positions of a pass (MODEL.md §4, §16) for qsa_block: this pass's (t, h, w) rows [3, T] on the device and
// on the host, and the positions of the session's earlier tokens (the pooled block keys rotate by the position of
// their block's first token).
struct QsaRope {
    const int32_t* pos3 = nullptr;                                 // device [3, T]
    const int32_t* host3 = nullptr;                                // host [3, T]
    const std::vector<std::array<int32_t, 3>>* earlier = nullptr;  // tokens 0 … P − 1
    int sec_h = 0, sec_w = 0;                                      // rope.dimension_sections [1], [2]
};

// Query t of a pass of T tokens at cache rows P … P+T−1 attends to cells off[t] … off[t+1] − 1 (T + 1 offsets): every
// key up to its row, or (cr > 0 and more complete blocks than the budget's) the kb·cr keys the indexer chooses and the
// tail past its complete blocks. The same for every QSA layer of one compress ratio.
std::vector<int32_t> qsa_query_offsets(const Hparams& hp, int cr, int P, int T);

// QSA attention: y [T, H] from u [T, H] for tokens at cache rows P … P+T−1 (also in the backend's memory as pos [T]);
// cr = 0 means dense attention. RoPE at the rows' index (text), or at mrope's positions when it is not null.
// offsets: qsa_query_offsets(hp, cr, P, T) in the backend's memory (a pass uploads them once for all its layers: each
// upload is a copy in the device's chain of work), or null to upload them here.
void qsa_block(Backend& be, const Hparams& hp, const QsaWeights& w, LayerState& st, int cr, const float* u, int T,
               int P, const int32_t* pos, float* y, const QsaRope* mrope = nullptr, const int32_t* offsets = nullptr);

// MoE with shared expert: y [T, H] from u [T, H].
void moe_block(Backend& be, const Hparams& hp, const MoeWeights& w, const float* u, int T, float* y);

// PLE in two steps: the table rows of the tokens ids begin to be read (at the start of their pass, or during the pass
// before), then at the PLE layer X += PLE(X) with them. context: ple_context of the tokens before ids, the last
// ple_ngram − 1 of history followed by pre[0 … n_pre) (fewer only at the sequence start).
std::vector<int32_t> ple_context(const Hparams& hp, const std::vector<int32_t>& history, const int32_t* pre,
                                 int n_pre);
void ple_begin_reads(const Hparams& hp, PleReader& reader, const std::vector<int32_t>& context, const int32_t* ids,
                     int T);
void ple_block(Backend& be, const Hparams& hp, const PleWeights& w, PleReader& reader, LayerState& st, int T,
               float* X, float* conv_in = nullptr);
// The PLE layer's carried conv history after T more rows of conv input ([T, n·H], as ple_block's conv_in records
// them): what ple_block leaves in st.ple_hist, without reading the table (Qwen4Exp::replay).
void ple_advance_history(Backend& be, const Hparams& hp, const PleWeights& w, LayerState& st, int T,
                         const float* conv_in);

// Table rows of each PLE head for token t of `tokens` (MODEL.md §6.2-6.3), given the tokens before it.
void ple_rows(const Hparams& hp, const std::vector<int32_t>& tokens, size_t t, uint64_t* rows);

}  // namespace strata
