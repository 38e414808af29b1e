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

    // Feeds T tokens after the session's tokens; writes the logits of the last token to logits_host (n_vocab
    // floats) when it is not null. Throws if the context would overflow.
    void forward(Session& s, const int32_t* ids, int T, float* logits_host);

private:
    Backend& be_;
    std::unique_ptr<GgufFile> file_;
    Hparams hp_;
    ModelWeights w_;
};

}  // namespace strata
