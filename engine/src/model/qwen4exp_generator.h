// TextGenerator over the qwen4exp model and one Session: what serve/ and the CLI drive.
#pragma once
#include <memory>
#include <vector>

#include "generate/text_generator.h"
#include "model/mtp_head.h"
#include "model/qwen4exp.h"
#include "model/session.h"

namespace strata {

// --draft-min-p's default (measured on the demo model: bench/results/2026-12-01-vm-draft-min-p).
constexpr float kDefaultDraftMinP = 0.5f;
// --park-mib's default: host memory for conversations another one displaced (a 32K-token conversation of the published
// shape takes ~1.8 GiB with f32 KV).
constexpr size_t kDefaultParkMib = 4096;

// The context a generator holds: n_ctx when given (> 0), else the training context up to 32,768.
int pick_context(const Hparams& hp, int n_ctx);

class Qwen4ExpGenerator : public TextGenerator {
public:
    // n_ctx 0 = min(trained context, 32768). chunk = tokens per prompt chunk.
    Qwen4ExpGenerator(Qwen4Exp& model, int n_ctx, int chunk = 256);
    // Loads the MTP head (its own GGUF) for greedy speculation of up to `depth` drafted tokens per pass.
    void enable_speculation(const std::string& mtp_path, int depth);
    // Without an MTP head: greedy speculation of up to `depth` tokens drafted from the session's own text
    // (generate/prompt_lookup.h; --spec-lookup N). 0 = off.
    void enable_lookup(int depth);

    int context_length() const override { return session_.n_ctx(); }
    int vocab_size() const override { return model_.hparams().n_vocab; }
    std::vector<int32_t> stop_ids() const override { return model_.hparams().stop_ids; }
    const std::vector<int32_t>& session_tokens() const override { return session_.tokens; }
    void reset_session() override;
    int32_t image_token_id() const override;
    int embedding_width() const override { return model_.hparams().n_embd; }
    int prepare_prompt(const std::vector<int32_t>& prompt, std::vector<PromptImage> images = {}) override;
    int checkpoint_count() const { return (int)checkpoints_.size(); }
    const float* append(std::span<const int32_t> tokens, const ProgressFn& progress, const CancelFn& cancel) override;
    int32_t append_choose(int32_t next) override;
    int chunk_tokens() const override { return chunk_; }
    // A checkpoint every n positions of a session (0 = none; --checkpoint-every, default 16384).
    void set_checkpoint_every(int n) { checkpoint_every_ = n; }
    // Host memory for parked conversations (0 = none; --park-mib, default kDefaultParkMib).
    void set_park_budget(size_t bytes) { park_budget_ = bytes; }
    int parked_count() const { return (int)parked_.size(); }
    // Drafting stops at a draft whose probability under the head is below p (0 = always draft the full depth;
    // --draft-min-p). The text is greedy's either way; fewer rejected drafts save rollbacks.
    void set_draft_min_p(float p) { draft_min_p_ = p; }
    int spec_depth() const override { return mtp_ ? depth_ : lookup_depth_; }
    // Wall time of speculation's parts since the start (seconds; the backend's work included, as each part ends
    // with results on the host or a copy on its stream): drafting (the MTP head's passes and the host's choice of
    // each draft), verify passes, and going back after a rejection (the rollback copy and the replay).
    struct SpecTimes {
        double draft_s = 0, verify_s = 0, rollback_s = 0;
    };
    SpecTimes spec_times() const { return spec_times_; }
    bool speculates() const { return replay_ != nullptr; }   // MTP or prompt-lookup drafts are on
    DraftedStep append_drafted(int32_t next, int max_extra, DraftRule* rule = nullptr) override;
    // Draft logits of the MTP head for every prompt pair (X_s, token s+1) the session holds, s = 0 … n_past−2,
    // processed from the start of the session (tests compare them with the PyTorch head).
    std::vector<float> mtp_logits_of_session();
    const float* last_logits() const { return logits_.data(); }
    std::vector<std::pair<std::string, std::string>> info() const override;

private:
    // Conversation checkpoints: the recurrent state (and the MTP head's queued row) after `tokens`, taken before the
    // last turn start (<|im_start|>) of each prompt, at the end of a long system prompt (before the second turn start
    // of a new session, at least kSystemCheckpointMin tokens in) and every checkpoint_every_ positions. Usable while
    // the KV rows of those positions are unchanged; the oldest goes first beyond kMaxCheckpoints.
    struct Checkpoint {
        std::vector<int32_t> tokens;
        Session::Snapshot state;
        std::vector<float> mtp_rows;
        int mtp_pos0 = 0;
    };
    static constexpr size_t kMaxCheckpoints = 8;
    // A parked conversation: a session that another prompt was about to overwrite, kept in host memory (its recurrent
    // state, its KV rows and the MTP head's) so that a later prompt that continues it reads only what is new, as if
    // no other conversation had come between. Parked when at least kParkMin of its tokens would be lost; the least
    // recently used go first beyond the budget.
    struct Parked {
        Checkpoint state;
        Session::Rows rows, mtp_rows;
        std::vector<uint64_t> keys;   // kv_keys_ of those rows
        size_t bytes = 0;
    };
    static constexpr int kParkMin = 512;   // below, a re-read is cheaper than it is worth
    // Parks the session (all its n tokens) unless it is too short, too big for the budget or already parked.
    void park_session();
    void restore_parked(size_t i);
    static constexpr int kSystemCheckpointMin = 256;
    // The prompt being read, when it has images: per token its M-RoPE position, the embedding row that replaces it
    // (null: its id's) and that row's key (0: text), and the text position after it; empty for text prompts.
    struct Plan {
        std::vector<PromptImage> images;
        std::vector<std::array<int32_t, 3>> pos;
        std::vector<const float*> rows;
        std::vector<uint64_t> keys;
        std::vector<int32_t> next;
    };
    void make_plan(const std::vector<int32_t>& prompt, std::vector<PromptImage> images);
    uint64_t prompt_key(const std::vector<int32_t>& prompt, size_t i) const {
        return i < plan_.keys.size() && plan_.keys[i] ? plan_.keys[i] : (uint64_t)(uint32_t)prompt[i];
    }
    // The M-RoPE positions of session tokens i0 … i0 + n − 1 (fed, or the next text tokens after the session's),
    // or an empty vector while the session is text only.
    std::vector<std::array<int32_t, 3>> session_positions(int i0, int n) const;
    void take_checkpoint();
    // Where append(tokens) takes checkpoints: indices i in (0, tokens.size()), after tokens[0, i) are fed; sorted.
    std::vector<int> checkpoint_points(std::span<const int32_t> tokens) const;
    // Runs the trunk over tokens and queues their wide residuals for the MTP head.
    // choice (optional): the greedy choice after the last token, computed by the backend.
    void feed(const int32_t* ids, int T, float* logits, bool all_logits, int32_t* choice = nullptr,
              Qwen4Exp::Replay* replay = nullptr);
    // append's body: the last chunk's logits into logits_, or (choice set) only its greedy choice.
    void append_tokens(std::span<const int32_t> tokens, const ProgressFn& progress, const CancelFn& cancel,
                       int32_t* choice);
    // Runs the MTP head over the queued rows whose next token is known (all but the last unless `next` is given);
    // with `next`, returns the draft logits of the last row and keeps its wide output in draft_wide_.
    const float* run_mtp(const int32_t* next);
    // Feeds window (`next` and its drafts) in one pass and keeps what greedy decoding would have fed: the accepted
    // drafts; on a rejection the state is rolled back and the accepted tokens fed again.
    DraftedStep verify_window(const std::vector<int32_t>& window, DraftRule* rule);
    // Prompt lookup (no MTP head): appends up to `want` drafts for window[0] unless drafting pauses; verify_lookup
    // verifies them and keeps the running share of accepted drafts that decides the pauses.
    void lookup_drafts_into(std::vector<int32_t>& window, int want);
    DraftedStep verify_lookup(const std::vector<int32_t>& window, DraftRule* rule);

    Qwen4Exp& model_;
    Session session_;
    int chunk_;
    int checkpoint_every_ = 16384;
    float draft_min_p_ = kDefaultDraftMinP;
    std::vector<float> logits_;

    std::unique_ptr<MtpHead> mtp_;
    std::unique_ptr<Qwen4Exp::Replay> replay_;   // a verify window's record, so a rejection needs no second pass
    SpecTimes spec_times_;
    int depth_ = 0;
    int lookup_depth_ = 0;
    // Prompt lookup: drafts need a match of at least kLookupMinNgram tokens; when the running share of accepted
    // drafts falls below kLookupPauseBelow, kLookupPausePasses passes draft nothing (bench/prompt_lookup: rejected
    // windows made the demo slower than plain decoding where its text stopped repeating).
    static constexpr int kLookupMinNgram = 3;
    static constexpr float kLookupPauseBelow = 0.5f;
    static constexpr int kLookupPausePasses = 16;
    float lookup_accept_ = 1.0f;
    int lookup_pause_ = 0;
    std::vector<float> mtp_rows_;     // queued trunk wide residuals [n, n·H] of positions mtp_pos0_ …
    int mtp_pos0_ = 0;
    std::vector<float> draft_logits_, draft_wide_, verify_logits_, verify_wide_;
    std::vector<float> mtp_log_;      // when logging: draft logits of processed rows (mtp_logits_of_session)
    bool mtp_logging_ = false;

    Plan plan_;
    std::vector<uint64_t> kv_keys_;            // the keys (id, or image row key) of the tokens whose keys/values
                                               // occupy the KV rows (survives resets)
    std::vector<Checkpoint> checkpoints_;      // most recently used last
    std::vector<Parked> parked_;               // most recently used last
    size_t park_budget_ = 0;
};

}  // namespace strata
