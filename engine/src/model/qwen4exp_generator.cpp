#include "model/qwen4exp_generator.h"

#include <algorithm>

#include "common/error.h"
#include "common/log.h"

namespace strata {

namespace {
int pick_context(const Hparams& hp, int n_ctx) {
    if (n_ctx > 0) return n_ctx;
    return std::min(hp.n_ctx_train, 32768);
}

int32_t argmax(const float* v, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; ++i)
        if (v[i] > v[best]) best = i;   // first maximum, as torch.argmax and the greedy sampler
    return best;
}
}  // namespace

Qwen4ExpGenerator::Qwen4ExpGenerator(Qwen4Exp& model, int n_ctx, int chunk)
    : model_(model), session_(model.backend(), model.hparams(), pick_context(model.hparams(), n_ctx)), chunk_(chunk) {
    STRATA_CHECK(chunk > 0, "chunk size must be positive, got ", chunk);
    logits_.resize(model.hparams().n_vocab);
}

void Qwen4ExpGenerator::enable_speculation(const std::string& mtp_path, int depth) {
    STRATA_CHECK(depth >= 1 && depth <= 8, "speculation depth must be 1..8, got ", depth);
    mtp_ = std::make_unique<MtpHead>(mtp_path, model_, session_.n_ctx());
    depth_ = depth;
    reset_session();
}

void Qwen4ExpGenerator::reset_session() {
    session_.reset();    // the KV rows keep their contents: kv_tokens_ still describes them
    mtp_rows_.clear();
    mtp_pos0_ = 0;
    mtp_log_.clear();
}

void Qwen4ExpGenerator::feed(const int32_t* ids, int T, float* logits, bool all_logits) {
    const size_t nH = (size_t)model_.hparams().hc_dim();
    const size_t P = session_.tokens.size();
    if (kv_tokens_.size() < P + T) kv_tokens_.resize(P + T);
    std::copy(ids, ids + T, kv_tokens_.begin() + P);
    if (!mtp_) {
        model_.forward(session_, ids, T, Qwen4Exp::Outputs{logits, all_logits, nullptr});
        return;
    }
    const size_t old = mtp_rows_.size();
    mtp_rows_.resize(old + (size_t)T * nH);
    model_.forward(session_, ids, T, Qwen4Exp::Outputs{logits, all_logits, mtp_rows_.data() + old});
}

const float* Qwen4ExpGenerator::run_mtp(const int32_t* next) {
    const int nH = model_.hparams().hc_dim(), V = model_.hparams().n_vocab;
    const int rows = (int)(mtp_rows_.size() / nH);
    // Row i (position mtp_pos0_ + i) pairs with token mtp_pos0_ + i + 1; the last row's token is `next`.
    const int known = next ? rows : rows - 1;
    if (known <= 0) return nullptr;
    std::vector<int32_t> ids(known);
    for (int i = 0; i < known; ++i) {
        const size_t pos = (size_t)mtp_pos0_ + i + 1;
        ids[i] = pos < session_.tokens.size() ? session_.tokens[pos] : *next;
    }
    draft_wide_.resize((size_t)known * nH);
    const bool want_logits = next || mtp_logging_;
    if (want_logits) draft_logits_.resize((size_t)known * V);
    mtp_->forward(mtp_rows_.data(), ids.data(), known, mtp_pos0_, want_logits ? draft_logits_.data() : nullptr,
                  draft_wide_.data());
    if (mtp_logging_) mtp_log_.insert(mtp_log_.end(), draft_logits_.begin(), draft_logits_.begin() + (size_t)known * V);
    mtp_rows_.erase(mtp_rows_.begin(), mtp_rows_.begin() + (size_t)known * nH);
    mtp_pos0_ += known;
    if (!next) return nullptr;
    draft_wide_.erase(draft_wide_.begin(), draft_wide_.end() - nH);   // keep the last row for chaining
    return draft_logits_.data() + (size_t)(known - 1) * V;
}

const float* Qwen4ExpGenerator::append(std::span<const int32_t> tokens, const ProgressFn& progress,
                                       const CancelFn& cancel) {
    STRATA_CHECK(!tokens.empty(), "append needs at least one token");
    const int total = (int)tokens.size();
    // A checkpoint goes before the last turn start of a prompt (not at the session's first token).
    int ckpt = -1;
    const int32_t turn = model_.hparams().turn_start_id;
    if (total > 1 && turn >= 0)
        for (int i = total - 1; i >= 0; --i)
            if (tokens[i] == turn) { ckpt = i; break; }
    if (ckpt == 0 && session_.n_past() == 0) ckpt = -1;
    for (int done = 0; done < total;) {
        int T = std::min(chunk_, total - done);
        if (ckpt > done && ckpt < done + T) T = ckpt - done;   // end a chunk at the checkpoint
        const bool last = done + T == total;
        feed(tokens.data() + done, T, last ? logits_.data() : nullptr, false);
        if (mtp_) run_mtp(nullptr);     // keeps the head's KV in step with the trunk
        done += T;
        if (done == ckpt) take_checkpoint();
        if (progress) progress(done, total);
        if (!last && cancel && cancel()) throw Cancelled{};
    }
    return logits_.data();
}

void Qwen4ExpGenerator::take_checkpoint() {
    for (auto it = checkpoints_.begin(); it != checkpoints_.end(); ++it)
        if (it->tokens == session_.tokens) { checkpoints_.erase(it); break; }
    if (checkpoints_.size() >= kMaxCheckpoints) checkpoints_.erase(checkpoints_.begin());
    checkpoints_.push_back({session_.tokens, session_.snapshot(), mtp_rows_, mtp_pos0_});
}

int Qwen4ExpGenerator::prepare_prompt(const std::vector<int32_t>& prompt) {
    auto is_strict_prefix = [&](const std::vector<int32_t>& t) {
        return !t.empty() && t.size() < prompt.size() && std::equal(t.begin(), t.end(), prompt.begin());
    };
    size_t best = is_strict_prefix(session_.tokens) ? session_.tokens.size() : 0;
    int pick = -1;
    for (int i = 0; i < (int)checkpoints_.size(); ++i) {
        const std::vector<int32_t>& t = checkpoints_[i].tokens;
        // Usable only while the KV rows still hold exactly these tokens.
        const bool kv_intact = kv_tokens_.size() >= t.size() && std::equal(t.begin(), t.end(), kv_tokens_.begin());
        if (t.size() > best && is_strict_prefix(t) && kv_intact) { best = t.size(); pick = i; }
    }
    if (pick < 0) {
        if (best == 0) reset_session();
        return (int)best;
    }
    Checkpoint c = std::move(checkpoints_[pick]);
    checkpoints_.erase(checkpoints_.begin() + pick);
    session_.tokens = c.tokens;
    session_.restore(c.state);
    mtp_rows_ = c.mtp_rows;
    mtp_pos0_ = c.mtp_pos0;
    checkpoints_.push_back(std::move(c));    // most recently used
    return (int)best;
}

TextGenerator::GreedyStep Qwen4ExpGenerator::append_greedy(int32_t next, int max_extra) {
    const Hparams& hp = model_.hparams();
    const int V = hp.n_vocab, nH = hp.hc_dim();
    GreedyStep step;
    const int P = session_.n_past();
    const int room = session_.n_ctx() - P - 1;
    const int want = std::min({depth_, max_extra, room});
    if (!mtp_ || want <= 0) {
        step.fed = {next};
        step.logits = append(std::span<const int32_t>(&next, 1), nullptr, nullptr);
        return step;
    }
    // Draft: the head pairs X_{P−1} with `next`, then chains its own wide output with each draft.
    std::vector<int32_t> window = {next};
    const float* dl = run_mtp(&next);
    const std::vector<int32_t>& stops = hp.stop_ids;
    for (int j = 0; j < want; ++j) {
        const int32_t d = argmax(dl, V);
        if (std::find(stops.begin(), stops.end(), d) != stops.end()) break;   // a stop is never fed
        window.push_back(d);
        if ((int)window.size() - 1 == want) break;
        draft_logits_.resize(V);
        std::vector<float> wide_in(draft_wide_);
        mtp_->forward(wide_in.data(), &d, 1, P + j, draft_logits_.data(), draft_wide_.data());
        dl = draft_logits_.data();
    }
    const int m = (int)window.size() - 1;
    step.offered = m;

    // Verify all drafts in one pass; roll back the recurrent state if some are rejected.
    Session::Snapshot snap;
    if (m > 0) snap = session_.snapshot();
    verify_logits_.resize((size_t)(m + 1) * V);
    const size_t rows_before = mtp_rows_.size();
    feed(window.data(), m + 1, verify_logits_.data(), true);
    int a = 0;
    while (a < m && argmax(verify_logits_.data() + (size_t)a * V, V) == window[a + 1]) ++a;
    step.accepted = a;
    step.fed.assign(window.begin(), window.begin() + a + 1);
    if (a < m) {
        session_.restore(snap);
        mtp_rows_.resize(rows_before + (size_t)(a + 1) * nH);   // the rows of accepted positions stay valid
        model_.forward(session_, window.data(), a + 1, Qwen4Exp::Outputs{nullptr, false, nullptr});
    }
    std::copy(verify_logits_.begin() + (size_t)a * V, verify_logits_.begin() + (size_t)(a + 1) * V, logits_.begin());
    step.logits = logits_.data();
    return step;
}

std::vector<float> Qwen4ExpGenerator::mtp_logits_of_session() {
    STRATA_CHECK(mtp_, "no MTP head loaded");
    std::vector<int32_t> tokens = session_.tokens;
    reset_session();
    mtp_logging_ = true;
    append(tokens, nullptr, nullptr);
    mtp_logging_ = false;
    return std::move(mtp_log_);
}

std::vector<std::pair<std::string, std::string>> Qwen4ExpGenerator::info() const {
    const Hparams& hp = model_.hparams();
    std::vector<std::pair<std::string, std::string>> out = {
        {"model", model_.file().paths()[0]},
        {"backend", model_.backend().name()},
        {"context", std::to_string(session_.n_ctx())},
        {"layers", std::to_string(hp.n_layer)},
        {"vocab", std::to_string(hp.n_vocab)},
        {"experts", std::to_string(hp.n_expert) + "x" + std::to_string(hp.n_expert_used)},
        {"chunk", std::to_string(chunk_)},
    };
    out.push_back({"spec_depth", std::to_string(spec_depth())});
    if (mtp_) out.push_back({"mtp", mtp_->path()});
    return out;
}

}  // namespace strata
