// The MTP draft head (GGUF.md §2.6): from the trunk's final wide residual X_t and the embedding of token t+1 it
// predicts token t+2, with one attention-type block (dense attention, its own KV cache) written with the trunk's
// block functions, its own output mixer, and the trunk's embedding and head. Loaded from its own GGUF
// (blk.L + nextn.*, Unsloth's layout) or from a main file that carries the block.
#pragma once
#include <memory>
#include <string>

#include "model/qwen4exp.h"

namespace strata {

class MtpHead {
public:
    MtpHead(const std::string& path, Qwen4Exp& trunk, int n_ctx);
    ~MtpHead();

    // T pairs at positions P0 … P0+T−1: wide_in [T, n·H] (trunk X_t, or this head's previous wide output when
    // chaining drafts) and next_ids [T] (token t+1). Writes draft logits [T, n_vocab] and wide_out [T, n·H]
    // (host; either may be null). Writes the head's KV cache at those positions.
    // pos3: the pairs' M-RoPE positions (t, h, w) [T] on the host, in a multimodal session; null: rope at P0 + t.
    void forward(const float* wide_in, const int32_t* next_ids, int T, int P0, float* logits, float* wide_out,
                 const std::array<int32_t, 3>* pos3 = nullptr);

    const std::string& path() const { return path_; }
    // Its KV state (positional, like the trunk's): a parked conversation copies its rows too.
    Session& kv_session() { return *kv_; }
    // The device memory the head takes beside the trunk, in bytes: its block's and nextn weights (blk.L.*, uploaded
    // whole: its 512 experts too) and its one-layer KV state of n_ctx positions.
    static size_t device_bytes(const std::string& path, int n_ctx, KvType kv);

private:
    Qwen4Exp& trunk_;
    std::string path_;
    std::unique_ptr<GgufFile> file_;
    Hparams hp_;
    LayerWeights block_;
    NextnWeights nextn_;
    std::unique_ptr<Session> kv_;   // only its one attention layer is used
    int n_ctx_;
};

}  // namespace strata
