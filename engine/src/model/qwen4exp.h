// THE model definition of qwen4exp: embed, the layer loop (PLE, hyper-connection read, GDN or QSA mixer,
// hyper-connection write, MoE), the output mixer and the head. Written over Backend ops only.
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gguf/gguf_file.h"
#include "model/hparams.h"
#include "model/ple_reader.h"
#include "model/session.h"
#include "model/weights.h"

namespace strata {

class Qwen4Exp {
public:
    // Opens the GGUF (all shards), reads and validates hyperparameters, binds every weight.
    Qwen4Exp(const std::string& path, Backend& be);

    const Hparams& hparams() const { return hp_; }
    const ModelWeights& weights() const { return w_; }
    GgufFile& file() { return *file_; }
    Backend& backend() { return be_; }
    const PleReader* ple_reader() const { return ple_.get(); }   // null without a PLE layer
    int64_t ple_reads_ahead() const { return ple_ahead_used_; }  // forwards whose rows were begun by the one before

    // What a forward pass hands back to the host (each pointer may be null).
    class Replay;
    struct Outputs {
        float* logits = nullptr;       // [n_vocab] of the last token, or [T, n_vocab] with all_logits
        bool all_logits = false;
        float* wide = nullptr;         // [T, n·H]: the final wide residual of every token (input of the MTP head)
        int32_t* argmax = nullptr;     // the greedy choice of the same rows (common/argmax.h), computed by the
                                       // backend: with logits null only an id a row reaches the host
        Replay* replay = nullptr;      // records what replay() needs (a verify pass whose drafts may be rejected)
    };
    // What a verify pass records so that a rejection needs no second pass: the input projections of every GDN layer
    // (Backend::GdnProjections) and the PLE layer's conv input, on the backend's device (~1.5 MB a token of the
    // published shape).
    class Replay {
    public:
        Replay(Backend& be, const Hparams& hp, int max_tokens);
        ~Replay();
        Replay(const Replay&) = delete;
        Replay& operator=(const Replay&) = delete;
        int max_tokens() const { return max_tokens_; }

    private:
        friend class Qwen4Exp;
        Backend& be_;
        int max_tokens_;
        std::vector<float*> proj_;     // per layer: a GDN layer's kept projections for max_tokens (null for others)
        float* ple_in_ = nullptr;      // [max_tokens, n·H] the PLE layer's conv input
        int tokens_ = 0;               // tokens of the recorded pass
        int32_t rope_next_ = -1;       // the session's rope_next before the pass when it was multimodal
    };
    // After Session::rollback to the state before a recorded pass: the state forward(ids[0 … n)) would have left,
    // n ≤ the pass's tokens. Only what carries over is recomputed (the GDN layers' conv histories and recurrent
    // states, the PLE conv history; the attention layers' KV rows of those positions are the pass's own), with the
    // same ops a pass of n tokens runs, and the tokens (and their text positions) go onto the session.
    void replay(Session& s, const int32_t* ids, int n, Replay& r);
    // Multimodal input of a pass (GENI prompts, MODEL.md §16); every array has T entries.
    struct Media {
        const std::array<int32_t, 3>* pos = nullptr;   // (t, h, w) rope positions; null: text after the session's
        const float* const* rows = nullptr;            // host rows of n_embd floats replacing the token's embedding
                                                       // (a null entry: the id's own row); null: none
        const uint64_t* keys = nullptr;                // the rows' keys for prefix matching (0 for an id's row)
        int32_t next = 0;                              // with pos: the text position after these tokens
    };
    // Feeds T tokens after the session's tokens. Throws if the context would overflow. A pass whose tokens all sit
    // at their index with their own embeddings, in a session that has held nothing else, is the text-only pass
    // (rope at the index); otherwise positions come from `media` or continue the session's (Session::rope_next) and
    // the attention layers use M-RoPE (Backend::rope_multi).
    void forward(Session& s, const int32_t* ids, int T, const Outputs& out, const Media* media = nullptr);
    void forward(Session& s, const int32_t* ids, int T, float* last_logits) {
        forward(s, ids, T, Outputs{last_logits, false, nullptr});
    }
    // The next forward of the session will feed these T tokens right after the next one's (the prompt's next chunk):
    // the next forward begins reading their PLE rows as soon as it has its own, so the reads overlap its work. A
    // forward with other tokens or context drops them.
    void announce_next(const int32_t* ids, int T) {
        if (ple_) next_ids_.assign(ids, ids + T);
    }

private:
    Backend& be_;
    std::unique_ptr<GgufFile> file_;
    Hparams hp_;
    ModelWeights w_;
    std::unique_ptr<PleReader> ple_;   // the PLE table's rows, read while the layers before the PLE layer run
    std::vector<int32_t> next_ids_;    // announce_next's tokens, for the next forward to begin
    // The reads in flight were begun for these tokens after this context (ple_context), during the last forward.
    std::vector<int32_t> ahead_ids_, ahead_context_;
    int64_t ple_ahead_used_ = 0;
};

}  // namespace strata
