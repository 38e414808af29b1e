// What the serve loop and the CLI need from a loaded model: one conversation session that a prompt fills and
// each token extends. The model implements it (model/qwen4exp_generator.*); serve/ and cli/ only use this.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/argmax.h"

namespace strata {

// Thrown by TextGenerator::append when the cancel callback returns true between chunks.
struct Cancelled {};

// One image of a prompt (GENI): its rows replace the prompt tokens start … start + n − 1 (a run of <|image_pad|>).
// Row i sits at the merged-grid column i % nx, row i / nx (n = nx · ny). hash names the rows and the grid: prefix
// reuse treats two images as the same only when their hashes are equal.
struct PromptImage {
    int start = 0, n = 0, nx = 0, ny = 0;
    uint64_t hash = 0;
    std::vector<float> rows;   // [n, n_embd]
};

class TextGenerator {
public:
    virtual ~TextGenerator() = default;

    virtual int context_length() const = 0;   // fixed at start; prompt + generated must fit
    virtual int vocab_size() const = 0;        // logits row length
    virtual std::vector<int32_t> stop_ids() const = 0;  // ids that end generation (from the GGUF)

    // Tokens whose state the session holds, in order (prompt tokens and fed generated tokens).
    virtual const std::vector<int32_t>& session_tokens() const = 0;
    // Forget everything (state back to empty).
    virtual void reset_session() = 0;

    // The <|image_pad|> id whose runs take image rows (GENI), or −1 when the model has none.
    virtual int32_t image_token_id() const { return -1; }
    // The width of an image row (the model's hidden size); 0 without image input.
    virtual int embedding_width() const { return 0; }

    // Before a prompt is read: keep (or restore from a conversation checkpoint) the longest state whose tokens are
    // a strict prefix of the prompt, else reset. Returns how many prompt tokens the session now holds. `images`
    // (ascending starts, inside the prompt) are read in place of their tokens by the append calls that read this
    // prompt; a state holds the same prefix only when its images there are the same (equal hashes).
    virtual int prepare_prompt(const std::vector<int32_t>& prompt, std::vector<PromptImage> images = {}) {
        if (!images.empty()) throw std::runtime_error("this model takes no image input");
        const std::vector<int32_t>& s = session_tokens();
        if (!s.empty() && s.size() < prompt.size() && std::equal(s.begin(), s.end(), prompt.begin()))
            return (int)s.size();
        reset_session();
        return 0;
    }

    // Feed tokens after session_tokens(). Prompts are processed in chunks of at most chunk_tokens();
    // after each chunk, progress(done, total) is called, then cancel() is polled; if it returns true the
    // session keeps the chunks already read and Cancelled is thrown. Returns the logits of the last token
    // (vocab_size() floats, valid until the next call).
    using ProgressFn = std::function<void(int done, int total)>;
    using CancelFn = std::function<bool()>;
    virtual const float* append(std::span<const int32_t> tokens, const ProgressFn& progress,
                                const CancelFn& cancel) = 0;
    virtual int chunk_tokens() const = 0;

    // Greedy decoding without drafts: feeds `next` and returns the greedy choice after it (argmax_first of the
    // logits append would return; the same session state). A model may compute it where the logits are (a GPU
    // backend then sends one id to the host instead of a vocabulary row); the logits are not kept.
    virtual int32_t append_choose(int32_t next) {
        const float* logits =
            append(std::span<const int32_t>(&next, 1), [](int, int) {}, [] { return false; });
        return argmax_first(logits, vocab_size());
    }

    // Speculation: how many drafted tokens one pass may verify (0 = none).
    virtual int spec_depth() const { return 0; }
    // How a request's drafts are made and checked, when not by the plain argmax: draft(logits, after) is the draft
    // the head's logits give once the window's tokens `after` follow (−1: none; a grammar's best allowed token);
    // accepts(logits, after, d) whether draft d stands at a verified row (greedy: d is the choice; sampling: drawn
    // with the sampler's probability of d, so the caller's next draw must exclude a rejected one, DraftedStep::rejected).
    struct DraftRule {
        virtual ~DraftRule() = default;
        virtual int32_t draft(const float* logits, int n_vocab, std::span<const int32_t> after) const = 0;
        virtual bool accepts(const float* logits, int n_vocab, std::span<const int32_t> after, int32_t draft) = 0;
    };
    struct DraftedStep {
        std::vector<int32_t> fed;       // tokens fed, in order; fed[0] is `next`, the rest are accepted drafts
        const float* logits = nullptr;  // logits after the last fed token
        int offered = 0;                // drafts verified in this pass
        int accepted = 0;               // drafts accepted (fed.size() − 1)
        int32_t rejected = -1;          // the draft that did not stand (the next token must not be drawn as it)
    };
    // Feeds `next` (the caller's choice) and up to max_extra further tokens drafted (the MTP head, or prompt lookup)
    // and verified in one pass; never a stop id. A draft stands where the rule accepts it (no rule: where it is the
    // argmax). The result equals feeding the same tokens one at a time (same state, same logits, bit for bit).
    virtual DraftedStep append_drafted(int32_t next, int max_extra, DraftRule* rule = nullptr) {
        DraftedStep step;
        step.fed = {next};
        step.logits = append(std::span<const int32_t>(&next, 1), nullptr, nullptr);
        return step;
    }

    // Short description lines for INFO (key, value).
    virtual std::vector<std::pair<std::string, std::string>> info() const = 0;
};

}  // namespace strata
