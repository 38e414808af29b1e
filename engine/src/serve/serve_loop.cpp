// The serve loop: a reader thread queues stdin lines (and counts STOP/QUIT at once, so they are seen while a
// prompt is read or tokens are generated); the calling thread runs one request at a time. See protocol.md.
#include "serve/serve_loop.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <istream>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>

#include "common/error.h"
#include "common/log.h"
#include "generate/draft_rule.h"
#include "generate/grammar_constraint.h"
#include "generate/sampler.h"
#include "serve/image_embeddings.h"
#include "serve/protocol.h"

#ifndef STRATA_VERSION
#define STRATA_VERSION "0.1.0"
#endif

namespace strata {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Lines read from stdin, shared with the reader thread.
struct InputQueue {
    std::mutex mutex;
    std::condition_variable ready;
    std::deque<std::string> lines;
    bool ended = false;        // QUIT read or end of input: the reader has stopped
    bool quit_read = false;    // a QUIT line was read
    int64_t stops_read = 0;    // STOP lines read so far (counted when queued)
};

std::string_view first_word(std::string_view line) {
    size_t b = line.find_first_not_of(' ');
    if (b == std::string_view::npos) return {};
    size_t e = line.find(' ', b);
    return line.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b);
}

void read_lines(std::istream& in, std::shared_ptr<InputQueue> q) {
    std::string line;
    while (std::getline(in, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        std::string_view word = first_word(line);
        std::lock_guard lock(q->mutex);
        if (word == "STOP") ++q->stops_read;
        bool quit = word == "QUIT";
        q->quit_read = q->quit_read || quit;
        q->lines.push_back(std::move(line));
        q->ready.notify_one();
        if (quit) break;
    }
    std::lock_guard lock(q->mutex);
    q->ended = true;
    q->ready.notify_one();
}

class ServeLoop {
public:
    ServeLoop(TextGenerator& gen, std::ostream& out, std::shared_ptr<InputQueue> q, const ServeHooks& hooks)
        : gen_(gen), out_(out), q_(std::move(q)), hooks_(hooks) {
        limits_.vocab_size = gen.vocab_size();
        limits_.context_length = gen.context_length();
        limits_.vision = hooks.vision && gen.image_token_id() >= 0;   // without --vision GENI gets ERR
        for (int32_t id : gen.stop_ids()) stop_ids_.push_back(id);
    }

    int run() {
        announce();
        while (true) {
            std::string line;
            {
                std::unique_lock lock(q_->mutex);
                q_->ready.wait(lock, [&] { return !q_->lines.empty() || q_->ended; });
                if (q_->lines.empty()) return 0;  // end of input, everything answered
                line = std::move(q_->lines.front());
                q_->lines.pop_front();
            }
            if (!out_) return 1;
            serve::Request req;
            try {
                req = serve::parse_request(line, limits_);
            } catch (const Error& e) {
                emit(serve::format_err(e.what()));
                log_info("serve", fmt("rejected a request: ", e.what()));
                continue;
            }
            switch (req.command) {
                case serve::Command::blank: break;
                case serve::Command::stop: ++stops_consumed_; break;  // idle STOP: nothing to cancel
                case serve::Command::quit: return out_ ? 0 : 1;
                case serve::Command::gen:
                case serve::Command::geni: run_request(req); break;
            }
        }
    }

private:
    void emit(const std::string& line) { out_ << line << '\n' << std::flush; }

    // A STOP read after this request's line (and not yet consumed), a QUIT, or a broken output cancels.
    bool cancel_requested() {
        std::lock_guard lock(q_->mutex);
        return q_->stops_read > stops_consumed_ || q_->quit_read || !out_;
    }

    void announce() {
        emit(serve::format_info("version", STRATA_VERSION));
        emit(serve::format_info("context", std::to_string(limits_.context_length)));
        emit(serve::format_info("vocab", std::to_string(limits_.vocab_size)));
        std::string stops;
        for (int32_t id : stop_ids_) stops += (stops.empty() ? "" : ",") + std::to_string(id);
        emit(serve::format_info("stop_ids", stops));
        emit(serve::format_info("chunk_tokens", std::to_string(gen_.chunk_tokens())));
        emit(serve::format_info("vision", limits_.vision ? "1" : "0"));
        const char* announced[] = {"version", "context", "vocab", "stop_ids", "chunk_tokens", "vision"};
        for (const auto& [key, value] : gen_.info())
            if (std::find(std::begin(announced), std::end(announced), key) == std::end(announced))
                emit(serve::format_info(key, value));
        for (const auto& [key, value] : hooks_.info) emit(serve::format_info(key, value));
        if (!hooks_.vocabulary.empty()) emit(serve::format_info("grammar", "1"));   // GEN's grammar= is served
        emit(serve::format_ready(limits_.context_length));
    }

    // How many leading prompt tokens the session holds (kept, or restored from a checkpoint); else it is reset.
    int reuse_session(const std::vector<int32_t>& prompt, std::vector<PromptImage> images) {
        return gen_.prepare_prompt(prompt, std::move(images));
    }

    void run_request(const serve::Request& req) {
        // GENI: the embeddings file is read and matched with the prompt's <|image_pad|> runs before anything else;
        // a fault is the request's ERR (before RESUME) and leaves the session as it was.
        std::vector<PromptImage> images;
        if (req.command == serve::Command::geni) {
            try {
                images = place_images(req.ids, gen_.image_token_id(),
                                      read_image_embeddings(req.embeddings_file, gen_.embedding_width()),
                                      req.embeddings_file);
            } catch (const Error& e) {
                emit(serve::format_err(e.what()));
                log_info("serve", fmt("rejected a request: ", e.what()));
                return;
            }
        }
        if (req.grammar && hooks_.vocabulary.empty()) {
            const char* why = "grammar needs the model's vocabulary (tokenizer.ggml.tokens), which this model file lacks";
            emit(serve::format_err(why));
            log_info("serve", fmt("rejected a request: ", why));
            return;
        }
        serve::DoneStats done;
        done.prompt = static_cast<int>(req.ids.size());
        if (hooks_.expert_cache_counts) std::tie(done.cache_hits, done.cache_lookups) = hooks_.expert_cache_counts();
        if (hooks_.done_counters) done.extra = hooks_.done_counters();
        Clock::time_point prompt_start = Clock::now();
        try {
            done.reused = reuse_session(req.ids, std::move(images));
            emit(serve::format_resume(done.reused));
            bool any_progress = false;
            auto progress = [&](int read, int total) {
                any_progress = true;
                double ms = ms_since(prompt_start);
                emit(serve::format_pp(done.reused + read, done.prompt, ms, ms > 0 ? read * 1000.0 / ms : 0));
            };
            auto cancel = [&] { return cancel_requested(); };
            std::span<const int32_t> rest(req.ids.data() + done.reused, req.ids.size() - done.reused);
            const float* logits = nullptr;
            try {
                logits = gen_.append(rest, progress, cancel);
            } catch (const Cancelled&) {
                done.prompt_ms = ms_since(prompt_start);
                done.finish = serve::Finish::cancel;
                finish_request(done);
                return;
            }
            done.prompt_ms = ms_since(prompt_start);
            if (!any_progress) progress(static_cast<int>(rest.size()), static_cast<int>(rest.size()));
            emit(serve::format_reused(done.reused));
            decode(req, logits, done);
        } catch (const std::exception& e) {
            gen_.reset_session();  // the state may be half-updated
            emit(serve::format_err(fmt("engine error: ", e.what())));
            log_warn("serve", fmt("request failed: ", e.what()));
        }
    }

    void decode(const serve::Request& req, const float* logits, serve::DoneStats& done) {
        Clock::time_point decode_start = Clock::now();
        Sampler sampler(req.sampling);
        std::vector<int32_t> history;
        if (req.sampling.has_penalties()) history = req.ids;
        const int n_vocab = gen_.vocab_size();
        auto never = [] { return false; };
        auto quiet = [](int, int) {};
        // Requests for logprobs decode one token a pass (each token's whole logits row is needed on the host).
        const bool want_logprobs = req.logprobs >= 0;
        std::unique_ptr<GrammarConstraint> grammar;
        if (req.grammar)
            grammar = std::make_unique<GrammarConstraint>(req.grammar, hooks_.vocabulary, stop_ids_, req.grammar_after);
        // Every request but one for logprobs speculates: its drafts stand where its own sampler (penalties, grammar,
        // temperature) would pick them (generate/draft_rule.h), so the tokens follow the same distribution.
        const bool plain_greedy = req.sampling.greedy() && !req.sampling.has_penalties() && !want_logprobs && !grammar;
        const bool speculate = gen_.spec_depth() > 0 && !want_logprobs;
        RequestDraftRule rule(sampler, grammar.get(), history);
        int32_t rejected = -1;   // the draft the last pass rejected: the next draw leaves it out
        int32_t chosen = -1;   // plain greedy without drafts: the next token, chosen by the generator (no logits)
        while (true) {
            if (cancel_requested()) { done.finish = serve::Finish::cancel; break; }
            const int32_t token = chosen >= 0 ? chosen
                                  : sampler.sample(logits, n_vocab, history,
                                                   grammar && grammar->active() ? grammar.get() : nullptr, rejected);
            rejected = -1;
            if (grammar) grammar->accept(token);
            emit(want_logprobs ? serve::format_token(token, token_logprobs(logits, n_vocab, token, req.logprobs))
                               : serve::format_token(token));
            ++done.generated;
            if (req.sampling.has_penalties()) history.push_back(token);
            if (std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end()) {
                done.finish = serve::Finish::stop;
                break;
            }
            if (done.generated >= req.max_new) { done.finish = serve::Finish::length; break; }
            if (speculate) {
                // The MTP head drafts, one pass verifies; accepted drafts are what the sampler would emit.
                TextGenerator::DraftedStep step = gen_.append_drafted(token, req.max_new - done.generated, &rule);
                for (size_t i = 1; i < step.fed.size(); ++i) {
                    if (grammar) grammar->accept(step.fed[i]);
                    if (req.sampling.has_penalties()) history.push_back(step.fed[i]);
                    emit(serve::format_token(step.fed[i]));
                    ++done.generated;
                }
                rejected = step.rejected;
                done.drafts_offered += step.offered;
                done.drafts_accepted += step.accepted;
                logits = step.logits;
                if (done.generated >= req.max_new) { done.finish = serve::Finish::length; break; }
                continue;
            }
            if (plain_greedy) {
                chosen = gen_.append_choose(token);
                continue;
            }
            int32_t one[1] = {token};
            logits = gen_.append(std::span<const int32_t>(one, 1), quiet, never);
        }
        done.decode_ms = ms_since(decode_start);
        finish_request(done);
    }

    // The request's expert-cache share for the log: hits of look-ups and the DONE counters.
    static std::string counters_text(const serve::DoneStats& done) {
        if (!done.cache_lookups && done.extra.empty()) return "";
        std::string s = fmt("; expert cache hits ", done.cache_hits, " of ", done.cache_lookups);
        for (const auto& [key, value] : done.extra) s += fmt(", ", key, " ", static_cast<int64_t>(value));
        return s;
    }

    void finish_request(serve::DoneStats done) {
        if (hooks_.expert_cache_counts) {   // the request's share: the counters now minus at its start
            const auto [hits, lookups] = hooks_.expert_cache_counts();
            done.cache_hits = hits - done.cache_hits;
            done.cache_lookups = lookups - done.cache_lookups;
        }
        if (hooks_.done_counters) {
            const std::vector<std::pair<std::string, double>> now = hooks_.done_counters();
            for (size_t i = 0; i < done.extra.size() && i < now.size(); ++i)
                done.extra[i].second = now[i].second - done.extra[i].second;
        }
        emit(serve::format_done(done));
        log_info("serve", fmt("request: prompt ", done.prompt, " (reused ", done.reused, ") in ",
                              static_cast<int>(done.prompt_ms), " ms, ", done.generated, " tokens in ",
                              static_cast<int>(done.decode_ms), " ms, ", serve::finish_name(done.finish),
                              counters_text(done)));
    }

    TextGenerator& gen_;
    std::ostream& out_;
    std::shared_ptr<InputQueue> q_;
    serve::Limits limits_;
    std::vector<int32_t> stop_ids_;
    int64_t stops_consumed_ = 0;
    const ServeHooks& hooks_;
};

}  // namespace

int serve_main(TextGenerator& gen, std::istream& in, std::ostream& out, const ServeHooks& hooks) {
    auto queue = std::make_shared<InputQueue>();
    std::thread reader(read_lines, std::ref(in), queue);
    int code = 1;
    try {
        code = ServeLoop(gen, out, queue, hooks).run();
    } catch (const std::exception& e) {
        log_warn("serve", fmt("serve loop failed: ", e.what()));
    }
    bool reader_stopping;
    {
        std::lock_guard lock(queue->mutex);
        // After a QUIT the reader is past its last read (it may not have marked the end yet): join it, so that no
        // thread of ours is still running while the process exits.
        reader_stopping = queue->ended || queue->quit_read;
    }
    // Otherwise the reader may still be blocked on input (output broke first); it holds the queue by shared_ptr.
    if (reader_stopping) reader.join(); else reader.detach();
    return code;
}

}  // namespace strata
