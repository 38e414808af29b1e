// THE model definition of qwen4exp: embed, the layer loop (PLE, hyper-connection read, GDN or QSA mixer,
// hyper-connection write, MoE), the output mixer and the head. Written over Backend ops only.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gguf/gguf_file.h"
#include "model/hparams.h"
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

    // What a forward pass hands back to the host (each pointer may be null).
    struct Outputs {
        float* logits = nullptr;       // [n_vocab] of the last token, or [T, n_vocab] with all_logits
        bool all_logits = false;
        float* wide = nullptr;         // [T, n·H]: the final wide residual of every token (input of the MTP head)
    };
    // Feeds T tokens after the session's tokens. Throws if the context would overflow.
    void forward(Session& s, const int32_t* ids, int T, const Outputs& out);
    void forward(Session& s, const int32_t* ids, int T, float* last_logits) {
        forward(s, ids, T, Outputs{last_logits, false, nullptr});
    }

private:
    Backend& be_;
    std::unique_ptr<GgufFile> file_;
    Hparams hp_;
    ModelWeights w_;
};

}  // namespace strata
