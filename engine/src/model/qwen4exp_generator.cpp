#include "model/qwen4exp_generator.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/argmax.h"
#include "common/error.h"
#include "common/log.h"
#include "generate/prompt_lookup.h"

namespace strata {

namespace {

// Whether softmax(v)[best] >= min_p, best the argmax: Σ_{i≠best} exp(v_i − v_best) <= 1/min_p − 1, summed until it
// is over (most terms are below e^−30 and cost one compare, so a 248K vocabulary takes a fraction of a millisecond).
bool confident(const float* v, int n, int32_t best, float min_p) {
    if (min_p <= 0.0f) return true;
    const float top = v[best], bound = 1.0f / min_p - 1.0f;
    float rest = 0.0f;
    for (int i = 0; i < n; ++i) {
        const float d = v[i] - top;
        if (i == best || d < -30.0f) continue;
        rest += std::exp(d);
        if (rest > bound) return false;
    }
    return true;
}
}  // namespace

int pick_context(const Hparams& hp, int n_ctx) {
    if (n_ctx > 0) return n_ctx;
    return std::min(hp.n_ctx_train, 32768);
}

Qwen4ExpGenerator::Qwen4ExpGenerator(Qwen4Exp& model, int n_ctx, int chunk)
    : model_(model), session_(model.backend(), model.hparams(), pick_context(model.hparams(), n_ctx)), chunk_(chunk) {
    STRATA_CHECK(chunk > 0, "chunk size must be positive, got ", chunk);
    logits_.resize(model.hparams().n_vocab);
}

void Qwen4ExpGenerator::enable_speculation(const std::string& mtp_path, int depth) {
    STRATA_CHECK(depth >= 1 && depth <= 8, "speculation depth must be 1..8, got ", depth);
    mtp_ = std::make_unique<MtpHead>(mtp_path, model_, session_.n_ctx());
    depth_ = depth;
    replay_ = std::make_unique<Qwen4Exp::Replay>(model_.backend(), model_.hparams(), depth + 1);
    reset_session();
}

void Qwen4ExpGenerator::enable_lookup(int depth) {
    STRATA_CHECK(depth >= 0 && depth <= 8, "lookup speculation depth must be 0..8, got ", depth);
    STRATA_CHECK(!mtp_ || depth == 0, "lookup drafts are for a model without an MTP head");
    lookup_depth_ = depth;
    if (depth > 0) replay_ = std::make_unique<Qwen4Exp::Replay>(model_.backend(), model_.hparams(), depth + 1);
}

void Qwen4ExpGenerator::reset_session() {
    session_.reset();    // the KV rows keep their contents: kv_keys_ still describes them
    mtp_rows_.clear();
    mtp_pos0_ = 0;
    mtp_log_.clear();
}

int32_t Qwen4ExpGenerator::image_token_id() const {
    const Hparams& hp = model_.hparams();
    return hp.image_token_id >= 0 && hp.image_token_id < hp.n_vocab ? hp.image_token_id : -1;
}

void Qwen4ExpGenerator::make_plan(const std::vector<int32_t>& prompt, std::vector<PromptImage> images) {
    plan_ = Plan{};
    if (images.empty()) return;
    const int n = (int)prompt.size(), H = model_.hparams().n_embd;
    plan_.images = std::move(images);
    plan_.pos.resize(n);
    plan_.rows.assign(n, nullptr);
    plan_.keys.assign(n, 0);
    plan_.next.resize(n);
    // get_rope_index (MODEL.md §16): text at (c, c, c), c += 1; an image of ny rows × nx columns at
    // (c, c + row, c + col), then c += max(nx, ny).
    int32_t c = 0;
    size_t k = 0;
    for (int i = 0; i < n;) {
        if (k < plan_.images.size() && plan_.images[k].start == i) {
            const PromptImage& im = plan_.images[k++];
            STRATA_CHECK(im.n == im.nx * im.ny && im.n > 0 && i + im.n <= n && im.rows.size() == (size_t)im.n * H,
                         "image at prompt position ", i, " does not fit the prompt (", im.n, " rows)");
            for (int r = 0; r < im.n; ++r) {
                plan_.pos[i + r] = {c, c + r / im.nx, c + r % im.nx};
                plan_.rows[i + r] = im.rows.data() + (size_t)r * H;
                // A key per row that names the image and the row (top bit set: never a token id).
                uint64_t z = im.hash + 0x9e3779b97f4a7c15ull * (uint64_t)(r + 1);
                z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
                z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
                plan_.keys[i + r] = (z ^ (z >> 31)) | (1ull << 63);
            }
            c += std::max(im.nx, im.ny);
            for (int r = 0; r < im.n; ++r) plan_.next[i + r] = c;
            i += im.n;
        } else {
            plan_.pos[i] = {c, c, c};
            plan_.next[i] = ++c;
            ++i;
        }
    }
    STRATA_CHECK(k == plan_.images.size(), "images must lie inside the prompt in ascending order");
}

std::vector<std::array<int32_t, 3>> Qwen4ExpGenerator::session_positions(int i0, int n) const {
    std::vector<std::array<int32_t, 3>> out;
    if (!session_.multimodal()) return out;
    const int P = session_.n_past();
    for (int i = i0; i < i0 + n; ++i) {
        const int32_t c = session_.rope_next + (i - P);
        out.push_back(i < P ? session_.rope_pos[i] : std::array<int32_t, 3>{c, c, c});
    }
    return out;
}

void Qwen4ExpGenerator::feed(const int32_t* ids, int T, float* logits, bool all_logits, int32_t* choice,
                             Qwen4Exp::Replay* replay) {
    const size_t nH = (size_t)model_.hparams().hc_dim();
    const size_t P = session_.tokens.size();
    // The prompt's plan covers its tokens; tokens after the prompt are text.
    Qwen4Exp::Media media;
    const bool planned = P + T <= plan_.pos.size();
    if (planned) media = {plan_.pos.data() + P, plan_.rows.data() + P, plan_.keys.data() + P, plan_.next[P + T - 1]};
    if (kv_keys_.size() < P + T) kv_keys_.resize(P + T);
    for (int t = 0; t < T; ++t)
        kv_keys_[P + t] = planned && plan_.keys[P + t] ? plan_.keys[P + t] : (uint64_t)(uint32_t)ids[t];
    const Qwen4Exp::Media* m = planned ? &media : nullptr;
    if (!mtp_) {
        model_.forward(session_, ids, T, Qwen4Exp::Outputs{logits, all_logits, nullptr, choice, replay}, m);
        return;
    }
    const size_t old = mtp_rows_.size();
    mtp_rows_.resize(old + (size_t)T * nH);
    model_.forward(session_, ids, T, Qwen4Exp::Outputs{logits, all_logits, mtp_rows_.data() + old, choice, replay}, m);
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
    const std::vector<std::array<int32_t, 3>> pos3 = session_positions(mtp_pos0_, known);
    mtp_->forward(mtp_rows_.data(), ids.data(), known, mtp_pos0_, want_logits ? draft_logits_.data() : nullptr,
                  draft_wide_.data(), pos3.empty() ? nullptr : pos3.data());
    if (mtp_logging_) mtp_log_.insert(mtp_log_.end(), draft_logits_.begin(), draft_logits_.begin() + (size_t)known * V);
    mtp_rows_.erase(mtp_rows_.begin(), mtp_rows_.begin() + (size_t)known * nH);
    mtp_pos0_ += known;
    if (!next) return nullptr;
    draft_wide_.erase(draft_wide_.begin(), draft_wide_.end() - nH);   // keep the last row for chaining
    return draft_logits_.data() + (size_t)(known - 1) * V;
}

const float* Qwen4ExpGenerator::append(std::span<const int32_t> tokens, const ProgressFn& progress,
                                       const CancelFn& cancel) {
    append_tokens(tokens, progress, cancel, nullptr);
    return logits_.data();
}

int32_t Qwen4ExpGenerator::append_choose(int32_t next) {
    int32_t choice = 0;
    append_tokens(std::span<const int32_t>(&next, 1), {}, {}, &choice);
    return choice;
}

void Qwen4ExpGenerator::append_tokens(std::span<const int32_t> tokens, const ProgressFn& progress,
                                      const CancelFn& cancel, int32_t* choice) {
    STRATA_CHECK(!tokens.empty(), "append needs at least one token");
    const int total = (int)tokens.size();
    const std::vector<int> at = checkpoint_points(tokens);
    // The chunks: at most chunk_ tokens, ending at each checkpoint.
    std::vector<int> ends;
    for (int done = 0, k = 0; done < total;) {
        while (k < (int)at.size() && at[k] <= done) ++k;
        int T = std::min(chunk_, total - done);
        if (k < (int)at.size() && at[k] < done + T) T = at[k++] - done;
        else if (k < (int)at.size() && at[k] == done + T) ++k;
        done += T;
        ends.push_back(done);
    }
    size_t next = 0;   // the next checkpoint of `at`
    int done = 0;
    for (size_t c = 0; c < ends.size(); ++c) {
        const int T = ends[c] - done;
        const bool last = c + 1 == ends.size();
        if (!last)   // its PLE rows are read while this chunk runs
            model_.announce_next(tokens.data() + ends[c], ends[c + 1] - ends[c]);
        feed(tokens.data() + done, T, last && !choice ? logits_.data() : nullptr, false, last ? choice : nullptr);
        if (mtp_) run_mtp(nullptr);     // keeps the head's KV in step with the trunk
        done += T;
        if (next < at.size() && done == at[next]) {
            take_checkpoint();
            ++next;
        }
        if (progress) progress(done, total);
        if (!last && cancel && cancel()) throw Cancelled{};
    }
}

std::vector<int> Qwen4ExpGenerator::checkpoint_points(std::span<const int32_t> tokens) const {
    const int total = (int)tokens.size(), n0 = session_.n_past();
    const int32_t turn = model_.hparams().turn_start_id;
    std::vector<int> at;
    if (turn >= 0) {
        // Before the last turn start (a regenerated answer, a re-rendered history resume there).
        for (int i = total - 1; i > 0; --i)
            if (tokens[i] == turn) {
                at.push_back(i);
                break;
            }
        // A new session's system prompt: before the turn that follows it, when it is long (a new chat with the same
        // system prompt and tools, as agents start one, resumes there).
        if (n0 == 0 && total > 0 && tokens[0] == turn)
            for (int i = 1; i < total; ++i)
                if (tokens[i] == turn) {
                    if (i >= kSystemCheckpointMin) at.push_back(i);
                    break;
                }
    }
    // Every checkpoint_every_ positions of the session (a long prompt that changes in the middle resumes near there).
    if (checkpoint_every_ > 0)
        for (int64_t p = ((int64_t)n0 / checkpoint_every_ + 1) * checkpoint_every_; p < (int64_t)n0 + total;
             p += checkpoint_every_)
            at.push_back((int)(p - n0));
    std::sort(at.begin(), at.end());
    at.erase(std::unique(at.begin(), at.end()), at.end());
    return at;
}

void Qwen4ExpGenerator::take_checkpoint() {
    for (auto it = checkpoints_.begin(); it != checkpoints_.end(); ++it)
        if (it->tokens == session_.tokens && it->state.embd_key == session_.embd_key) { checkpoints_.erase(it); break; }
    if (checkpoints_.size() >= kMaxCheckpoints) checkpoints_.erase(checkpoints_.begin());
    checkpoints_.push_back({session_.tokens, session_.snapshot(), mtp_rows_, mtp_pos0_});
}

int Qwen4ExpGenerator::prepare_prompt(const std::vector<int32_t>& prompt, std::vector<PromptImage> images) {
    if (!images.empty()) STRATA_CHECK(image_token_id() >= 0, "this model has no <|image_pad|> token for images");
    make_plan(prompt, std::move(images));
    // A state is a strict prefix of the prompt when its tokens are, and its tokens' keys (ids, or image rows for
    // image tokens) equal the prompt's: the same placeholder ids with another picture (or none) never match.
    auto key_of = [](const std::vector<int32_t>& t, const std::vector<uint64_t>& embd, size_t i) {
        return !embd.empty() && embd[i] ? embd[i] : (uint64_t)(uint32_t)t[i];
    };
    auto is_strict_prefix = [&](const std::vector<int32_t>& t, const std::vector<uint64_t>& embd) {
        if (t.empty() || t.size() >= prompt.size()) return false;
        for (size_t i = 0; i < t.size(); ++i)
            if (t[i] != prompt[i] || key_of(t, embd, i) != prompt_key(prompt, i)) return false;
        return true;
    };
    size_t best = is_strict_prefix(session_.tokens, session_.embd_key) ? session_.tokens.size() : 0;
    int pick = -1;
    for (int i = 0; i < (int)checkpoints_.size(); ++i) {
        const std::vector<int32_t>& t = checkpoints_[i].tokens;
        const std::vector<uint64_t>& embd = checkpoints_[i].state.embd_key;
        // Usable only while the KV rows still hold exactly these tokens (and images).
        bool kv_intact = kv_keys_.size() >= t.size();
        for (size_t j = 0; j < t.size() && kv_intact; ++j) kv_intact = kv_keys_[j] == key_of(t, embd, j);
        if (t.size() > best && is_strict_prefix(t, embd) && kv_intact) { best = t.size(); pick = i; }
    }
    int parked_pick = -1;
    for (int i = 0; i < (int)parked_.size(); ++i) {
        const Checkpoint& c = parked_[i].state;
        if (c.tokens.size() > best && is_strict_prefix(c.tokens, c.state.embd_key)) {
            best = c.tokens.size();
            parked_pick = i;
            pick = -1;
        }
    }
    // The session's rows past the part the prompt shares with it are about to be overwritten: park it first when
    // that drops at least kParkMin of its tokens (another conversation; not a regenerated answer).
    if (pick >= 0 || parked_pick >= 0 || best < session_.tokens.size()) {
        size_t common = 0;
        const std::vector<int32_t>& t = session_.tokens;
        while (common < t.size() && common < prompt.size() && t[common] == prompt[common] &&
               key_of(t, session_.embd_key, common) == prompt_key(prompt, common))
            ++common;
        if (t.size() - common >= (size_t)kParkMin) park_session();
    }
    if (parked_pick >= 0) {
        restore_parked(parked_pick);
        return (int)best;
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

void Qwen4ExpGenerator::park_session() {
    const size_t n = session_.tokens.size();
    if (park_budget_ == 0 || n < (size_t)kParkMin) return;
    for (const Parked& p : parked_)
        if (p.state.tokens == session_.tokens && p.state.state.embd_key == session_.embd_key) return;
    Parked p;
    p.state = {session_.tokens, session_.snapshot(), mtp_rows_, mtp_pos0_};
    p.rows = session_.copy_rows(n);
    if (mtp_) p.mtp_rows = mtp_->kv_session().copy_rows(n);
    STRATA_ASSERT(kv_keys_.size() >= n);
    p.keys.assign(kv_keys_.begin(), kv_keys_.begin() + n);
    p.bytes = p.rows.bytes() + p.mtp_rows.bytes() + p.state.mtp_rows.size() * sizeof(float) +
              n * (sizeof(int32_t) + sizeof(uint64_t));
    for (const auto& b : p.state.state.buffers) p.bytes += b.size() * sizeof(float);
    const auto mib = [](size_t b) { return (b + (1 << 19)) >> 20; };
    if (p.bytes > park_budget_) {
        log_info("session", fmt("a conversation of ", n, " tokens needs ", mib(p.bytes), " MiB to be parked, more than "
                                "--park-mib ", mib(park_budget_), ": not parked"));
        return;
    }
    // A parked conversation this one extends holds nothing it does not.
    std::erase_if(parked_, [&](const Parked& q) {
        const std::vector<int32_t>& t = q.state.tokens;
        return t.size() <= n && std::equal(t.begin(), t.end(), session_.tokens.begin()) &&
               std::equal(q.keys.begin(), q.keys.end(), p.keys.begin());
    });
    parked_.push_back(std::move(p));
    size_t total = 0;
    for (const Parked& q : parked_) total += q.bytes;
    while (total > park_budget_) {
        total -= parked_.front().bytes;
        parked_.erase(parked_.begin());
    }
    log_info("session", fmt("parked a conversation of ", n, " tokens (", mib(parked_.back().bytes), " MiB); ",
                            parked_.size(), " parked, ", mib(total), " MiB"));
}

void Qwen4ExpGenerator::restore_parked(size_t i) {
    Parked p = std::move(parked_[i]);
    parked_.erase(parked_.begin() + i);
    const size_t n = p.state.tokens.size();
    session_.tokens = p.state.tokens;
    session_.restore(p.state.state);
    session_.restore_rows(p.rows);
    if (mtp_) mtp_->kv_session().restore_rows(p.mtp_rows);
    mtp_rows_ = p.state.mtp_rows;
    mtp_pos0_ = p.state.mtp_pos0;
    mtp_log_.clear();
    if (kv_keys_.size() < n) kv_keys_.resize(n);
    std::copy(p.keys.begin(), p.keys.end(), kv_keys_.begin());
    log_info("session", fmt("resumed a parked conversation of ", n, " tokens"));
    parked_.push_back(std::move(p));   // it stays parked (most recently used) until this session is parked over it
}

TextGenerator::DraftedStep Qwen4ExpGenerator::append_drafted(int32_t next, int max_extra, DraftRule* rule) {
    const Hparams& hp = model_.hparams();
    const int V = hp.n_vocab;
    DraftedStep step;
    const int P = session_.n_past();
    const int room = session_.n_ctx() - P - 1;
    const int want = std::min({mtp_ ? depth_ : lookup_depth_, max_extra, room});
    std::vector<int32_t> window = {next};
    if (!mtp_ && want > 0) {
        lookup_drafts_into(window, want);
        if (window.size() > 1) return verify_lookup(window, rule);
    }
    if (!mtp_ || want <= 0) {
        step.fed = {next};
        step.logits = append(std::span<const int32_t>(&next, 1), nullptr, nullptr);
        return step;
    }
    // Draft: the head pairs X_{P−1} with `next`, then chains its own wide output with each draft.
    const auto draft_start = std::chrono::steady_clock::now();
    const float* dl = run_mtp(&next);
    const std::vector<int32_t>& stops = hp.stop_ids;
    for (int j = 0; j < want; ++j) {
        const int32_t d = rule ? rule->draft(dl, V, std::span<const int32_t>(window).subspan(1)) : argmax_first(dl, V);
        if (d < 0 || std::find(stops.begin(), stops.end(), d) != stops.end()) break;   // a stop is never fed
        // An unsure draft is likely rejected, and a rejection costs a rollback and another pass: stop there.
        if (!confident(dl, V, d, draft_min_p_)) break;
        window.push_back(d);
        if ((int)window.size() - 1 == want) break;
        draft_logits_.resize(V);
        std::vector<float> wide_in(draft_wide_);
        const std::vector<std::array<int32_t, 3>> pos3 = session_positions(P + j, 1);
        mtp_->forward(wide_in.data(), &d, 1, P + j, draft_logits_.data(), draft_wide_.data(),
                      pos3.empty() ? nullptr : pos3.data());
        dl = draft_logits_.data();
    }
    spec_times_.draft_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - draft_start).count();
    return verify_window(window, rule);
}

void Qwen4ExpGenerator::lookup_drafts_into(std::vector<int32_t>& window, int want) {
    if (lookup_pause_ > 0) {
        --lookup_pause_;
        return;
    }
    // What followed the last 3-4 tokens (the session's and `next`) earlier in the session. `next` goes onto the
    // token list only for the search, so no copy of a long session is made per pass.
    session_.tokens.push_back(window[0]);
    const std::vector<int32_t> d = lookup_drafts(session_.tokens, want, model_.hparams().stop_ids, kLookupMinNgram);
    session_.tokens.pop_back();
    window.insert(window.end(), d.begin(), d.end());
}

TextGenerator::DraftedStep Qwen4ExpGenerator::verify_lookup(const std::vector<int32_t>& window,
                                                            DraftRule* rule) {
    DraftedStep step = verify_window(window, rule);
    // A rejected draft costs a second pass: where the text stops repeating itself, pause drafting for a while.
    lookup_accept_ = 0.8f * lookup_accept_ + 0.2f * (float)step.accepted / (float)step.offered;
    if (lookup_accept_ < kLookupPauseBelow) {
        lookup_pause_ = kLookupPausePasses;
        lookup_accept_ = 0.75f;
    }
    return step;
}

TextGenerator::DraftedStep Qwen4ExpGenerator::verify_window(const std::vector<int32_t>& window,
                                                            DraftRule* rule) {
    const int V = model_.hparams().n_vocab, nH = model_.hparams().hc_dim();
    DraftedStep step;
    const int m = (int)window.size() - 1;
    step.offered = m;

    // Verify all drafts in one pass; roll back the recurrent state if some are rejected.
    const auto verify_start = std::chrono::steady_clock::now();
    if (m > 0) session_.mark();
    verify_logits_.resize((size_t)(m + 1) * V);
    const size_t rows_before = mtp_rows_.size();
    feed(window.data(), m + 1, verify_logits_.data(), true, nullptr, m > 0 ? replay_.get() : nullptr);
    int a = 0;
    const auto stands = [&](int i) {   // draft window[i + 1] at the row after window[0 … i]
        const float* row = verify_logits_.data() + (size_t)i * V;
        return rule ? rule->accepts(row, V, std::span<const int32_t>(window).subspan(1, i), window[i + 1])
                    : argmax_first(row, V) == window[i + 1];
    };
    const auto verified = std::chrono::steady_clock::now();
    spec_times_.verify_s += std::chrono::duration<double>(verified - verify_start).count();
    while (a < m && stands(a)) ++a;
    step.accepted = a;
    if (a < m) step.rejected = window[a + 1];
    step.fed.assign(window.begin(), window.begin() + a + 1);
    if (a < m) {
        session_.rollback();
        if (mtp_) mtp_rows_.resize(rows_before + (size_t)(a + 1) * nH);   // the accepted positions' rows stay valid
        model_.replay(session_, window.data(), a + 1, *replay_);
        model_.backend().synchronize();
        spec_times_.rollback_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - verified).count();
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
    out.push_back({"park_mib", std::to_string(park_budget_ >> 20)});
    return out;
}

}  // namespace strata
