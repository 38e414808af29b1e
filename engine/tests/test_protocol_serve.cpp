// serve_loop against the golden transcripts and the STOP / QUIT / end-of-input rules, driven through pipes like
// the gateway drives the engine. The model is a small deterministic stand-in (the real engine is covered by
// tests/protocol/test_engine_protocol.py); it keeps TextGenerator's contract: chunks, progress, cancel, session.
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <istream>
#include <ostream>
#include <streambuf>
#include <thread>

#include "check.h"
#include "serve/serve_loop.h"
#include "test_protocol_golden.h"

namespace {

class StandInGenerator : public strata::TextGenerator {
public:
    int delay_us = 0;  // per chunk and per token, so a STOP can arrive mid-request
    int context_length() const override { return 4096; }
    int vocab_size() const override { return 248320; }
    std::vector<int32_t> stop_ids() const override { return {248046, 248044}; }
    const std::vector<int32_t>& session_tokens() const override { return tokens_; }
    void reset_session() override { tokens_.clear(); }
    int chunk_tokens() const override { return 4; }
    std::vector<std::pair<std::string, std::string>> info() const override { return {{"backend", "stand in"}}; }
    const float* append(std::span<const int32_t> tokens, const ProgressFn& progress, const CancelFn& cancel) override {
        int total = static_cast<int>(tokens.size());
        for (int done = 0; done < total;) {
            int n = std::min(chunk_tokens(), total - done);
            tokens_.insert(tokens_.end(), tokens.begin() + done, tokens.begin() + done + n);
            done += n;
            if (delay_us) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
            progress(done, total);
            if (cancel()) throw strata::Cancelled{};
        }
        // Logits that depend on the whole session; the best token is never a stop id.
        uint64_t h = 1469598103934665603ull;
        for (int32_t t : tokens_) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
        logits_.assign(vocab_size(), -10.0f);
        for (int i = 0; i < 100; ++i) logits_[1000 + (h + i * 7919) % 100000] = static_cast<float>(i % 17) * 0.25f;
        return logits_.data();
    }

private:
    std::vector<int32_t> tokens_;
    std::vector<float> logits_;
};

// std::istream / std::ostream over pipe ends; reads give up after a timeout so a bug fails instead of hanging.
class FdReadBuf : public std::streambuf {
public:
    explicit FdReadBuf(int fd) : fd_(fd) {}
protected:
    int_type underflow() override {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 10000) <= 0) return traits_type::eof();
        ssize_t n = ::read(fd_, buf_, sizeof buf_);
        if (n <= 0) return traits_type::eof();
        setg(buf_, buf_, buf_ + n);
        return traits_type::to_int_type(buf_[0]);
    }
private:
    int fd_;
    char buf_[4096];
};

class FdWriteBuf : public std::streambuf {
public:
    explicit FdWriteBuf(int fd) : fd_(fd) {}
protected:
    int_type overflow(int_type c) override {
        if (c == traits_type::eof()) return 0;
        char ch = static_cast<char>(c);
        return ::write(fd_, &ch, 1) == 1 ? c : traits_type::eof();
    }
    std::streamsize xsputn(const char* s, std::streamsize n) override {
        std::streamsize done = 0;
        while (done < n) {
            ssize_t w = ::write(fd_, s + done, n - done);
            if (w <= 0) return done;
            done += w;
        }
        return done;
    }
private:
    int fd_;
};

// A running serve_main with its stdin and stdout as pipes.
struct Engine {
    StandInGenerator gen;
    int to_engine[2], from_engine[2];
    FdReadBuf* in_buf;
    FdWriteBuf* out_buf;
    std::istream* engine_in;
    std::ostream* engine_out;
    FdReadBuf* reply_buf;
    std::istream* replies;
    std::thread thread;
    int exit_code = -1;

    explicit Engine(int delay_us = 0) {
        gen.delay_us = delay_us;
        CHECK(::pipe(to_engine) == 0 && ::pipe(from_engine) == 0);
        in_buf = new FdReadBuf(to_engine[0]);
        out_buf = new FdWriteBuf(from_engine[1]);
        engine_in = new std::istream(in_buf);
        engine_out = new std::ostream(out_buf);
        reply_buf = new FdReadBuf(from_engine[0]);
        replies = new std::istream(reply_buf);
        thread = std::thread([this] {
            exit_code = strata::serve_main(gen, *engine_in, *engine_out);
            ::close(from_engine[1]);
        });
    }
    void send(const std::string& line) {
        std::string l = line + "\n";
        CHECK(::write(to_engine[1], l.data(), l.size()) == static_cast<ssize_t>(l.size()));
    }
    std::string read() {
        std::string line;
        if (!std::getline(*replies, line)) return "<no line>";
        return line;
    }
    std::string read_until_ready() {
        std::string line, infos;
        while ((line = read()).rfind("INFO ", 0) == 0) infos += line + "\n";
        CHECK_MSG(line == "READY 4096 stop", "got '%s'", line.c_str());
        return infos;
    }
    void close_input() { ::close(to_engine[1]); }
    int finish() {
        thread.join();
        ::close(to_engine[0]);
        ::close(from_engine[0]);
        delete replies; delete reply_buf; delete engine_in; delete engine_out; delete in_buf; delete out_buf;
        return exit_code;
    }
};

void test_golden_transcripts() {
    for (const auto& t : golden::load_all()) {
        Engine e;
        std::string infos = e.read_until_ready();
        CHECK(infos.find("INFO vocab=248320\n") != std::string::npos);
        CHECK(infos.find("INFO stop_ids=248046,248044\n") != std::string::npos);
        CHECK(infos.find("INFO backend=stand_in\n") != std::string::npos);
        std::string pending;
        for (const auto& step : t.steps) {
            e.send(step.send);
            for (const auto& pattern : step.expect) {
                std::string base;
                bool many = golden::repeated(pattern, base);
                std::string line = pending.empty() ? e.read() : pending;
                pending.clear();
                CHECK_MSG(golden::matches(base, line), "%s: after '%s' expected '%s', got '%s'", t.name.c_str(),
                          step.send.c_str(), pattern.c_str(), line.c_str());
                while (many) {
                    line = e.read();
                    if (!golden::matches(base, line)) { pending = line; break; }
                }
            }
        }
        CHECK(pending.empty());
        e.send("QUIT");
        CHECK(e.read() == "<no line>");
        CHECK(e.finish() == 0);
    }
}

std::vector<std::string> read_request(Engine& e) {
    std::vector<std::string> lines;
    while (true) {
        lines.push_back(e.read());
        const std::string& l = lines.back();
        if (l.rfind("DONE ", 0) == 0 || l.rfind("ERR ", 0) == 0 || l == "<no line>") return lines;
    }
}

std::string long_prompt(int n) {
    std::string ids = "1";
    for (int i = 1; i < n; ++i) ids += "," + std::to_string(1 + i % 5000);
    return ids;
}

void test_stop_during_prompt() {
    Engine e(2000);  // 2 ms per 4-token chunk: 400 chunks take 0.8 s
    e.read_until_ready();
    e.send("GEN 5 " + long_prompt(1600));
    CHECK(e.read() == "RESUME 0");
    CHECK(e.read().rfind("PP 4 1600 ", 0) == 0);
    e.send("STOP");
    std::vector<std::string> rest = read_request(e);
    auto done = golden::fields(rest.back());
    CHECK_MSG(done[0] == "DONE" && done[1] == "0" && done[2] == "1600" && done[4] == "0.0" && done[5] == "cancel",
              "got '%s'", rest.back().c_str());
    for (auto& l : rest) CHECK(l.rfind("T ", 0) != 0 && l.rfind("REUSED", 0) != 0);
    // The chunks read stay in the session: the same prompt again resumes from them.
    e.send("GEN 2 " + long_prompt(1600));
    std::string resume = e.read();
    int reused = std::atoi(resume.c_str() + 7);
    CHECK_MSG(resume.rfind("RESUME ", 0) == 0 && reused > 0 && reused < 1600 && reused % 4 == 0, "got '%s'",
              resume.c_str());
    std::vector<std::string> second = read_request(e);
    CHECK(second.back().rfind("DONE 2 1600 ", 0) == 0);
    CHECK(golden::fields(second.back())[8] == std::to_string(reused));
    e.close_input();
    CHECK(e.finish() == 0);
}

void test_stop_during_decode() {
    Engine e(1000);
    e.read_until_ready();
    e.send("GEN 4000 1,2,3");
    std::vector<std::string> lines;
    while ((lines.emplace_back(e.read())).rfind("T ", 0) != 0) {}
    e.send("STOP");
    std::vector<std::string> rest = read_request(e);
    int tokens = 1;
    for (auto& l : rest) tokens += l.rfind("T ", 0) == 0;
    auto done = golden::fields(rest.back());
    CHECK_MSG(done[0] == "DONE" && done[5] == "cancel" && std::stoi(done[1]) == tokens && tokens < 4000, "got '%s'",
              rest.back().c_str());
    // The next request is not cancelled by that STOP.
    e.send("GEN 3 1,2,3");
    CHECK(read_request(e).back().rfind("DONE 3 3 ", 0) == 0);
    e.close_input();
    CHECK(e.finish() == 0);
}

void test_quit_cancels_and_eof_finishes() {
    {
        Engine e(1000);
        e.read_until_ready();
        e.send("GEN 4000 1,2,3");
        CHECK(e.read() == "RESUME 0");
        e.send("QUIT");
        std::vector<std::string> rest = read_request(e);
        CHECK(golden::fields(rest.back())[5] == "cancel");
        CHECK(e.read() == "<no line>");
        CHECK(e.finish() == 0);
    }
    {
        Engine e(100);
        e.read_until_ready();
        e.send("GEN 50 1,2,3");
        e.close_input();  // end of input: the request already sent is still answered
        std::vector<std::string> rest = read_request(e);
        CHECK(rest.back().rfind("DONE 50 3 ", 0) == 0);
        CHECK(golden::fields(rest.back())[5] == "length");
        CHECK(e.read() == "<no line>");
        CHECK(e.finish() == 0);
    }
}

void test_seeded_requests_repeat() {
    Engine e;
    e.read_until_ready();
    auto tokens = [&](const std::string& line) {
        e.send(line);
        std::string out;
        for (auto& l : read_request(e)) if (l.rfind("T ", 0) == 0) out += l.substr(2) + ",";
        return out;
    };
    std::string a = tokens("GEN 20 temperature=1.5 seed=5 11,12,13");
    std::string b = tokens("GEN 20 temperature=1.5 seed=5 11,12,13");
    std::string c = tokens("GEN 20 temperature=1.5 seed=6 11,12,13");
    std::string g1 = tokens("GEN 20 11,12,13");
    std::string g2 = tokens("GEN 20 seed=77 11,12,13");
    CHECK(a == b);
    CHECK(a != c);
    CHECK(g1 == g2);  // greedy ignores the seed
    e.close_input();
    CHECK(e.finish() == 0);
}

}  // namespace

int main() {
    test_golden_transcripts();
    test_stop_during_prompt();
    test_stop_during_decode();
    test_quit_cancels_and_eof_finishes();
    test_seeded_requests_repeat();
    return test::exit_code();
}
