// serve/protocol: every request line of the golden transcripts parses (or fails with exactly the ERR of the
// transcript), plus the output formats and the sampling keys' values.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "check.h"
#include "common/error.h"
#include "serve/protocol.h"
#include "test_protocol_golden.h"

using namespace strata::serve;

static const Limits kLimits{248320, 4096, false};

static void test_golden_requests() {
    int checked = 0;
    for (const auto& t : golden::load_all()) {
        for (const auto& step : t.steps) {
            bool want_err = !step.expect.empty() && step.expect[0].rfind("ERR ", 0) == 0;
            try {
                Request r = parse_request(step.send, kLimits);
                CHECK_MSG(!want_err, "%s: '%s' parsed, expected %s", t.name.c_str(), step.send.c_str(),
                          step.expect[0].c_str());
                if (step.send.rfind("GEN ", 0) == 0) {
                    CHECK(r.command == Command::gen);
                    CHECK(!r.ids.empty());
                    // The expected DONE carries the prompt length.
                    const std::string& last = step.expect.back();
                    auto f = golden::fields(last);
                    CHECK_MSG(f[0] == "DONE" && f[2] == std::to_string(r.ids.size()), "%s: %s", t.name.c_str(),
                              last.c_str());
                }
            } catch (const strata::Error& e) {
                std::string line = format_err(e.what());
                CHECK_MSG(want_err && golden::matches(step.expect[0], line), "%s: '%s' gave '%s'", t.name.c_str(),
                          step.send.c_str(), line.c_str());
            }
            ++checked;
        }
    }
    CHECK_MSG(checked >= 40, "only %d golden request lines found in %s", checked, golden::dir().c_str());
}

static void test_fields() {
    Request r = parse_request("GEN 7 temperature=0.5 top_k=12 top_p=0.9 min_p=0.1 repeat_penalty=1.2 "
                              "frequency_penalty=-0.5 presence_penalty=1.5 penalty_window=10 seed=99 x=1 1,2,3\r",
                              kLimits);
    CHECK(r.command == Command::gen && r.max_new == 7);
    CHECK(r.sampling.temperature == 0.5 && r.sampling.top_k == 12 && r.sampling.top_p == 0.9);
    CHECK(r.sampling.min_p == 0.1 && r.sampling.repeat_penalty == 1.2);
    CHECK(r.sampling.frequency_penalty == -0.5 && r.sampling.presence_penalty == 1.5);
    CHECK(r.sampling.penalty_window == 10 && r.sampling.seed && *r.sampling.seed == 99);
    CHECK((r.ids == std::vector<int32_t>{1, 2, 3}));
    Request g = parse_request("GEN 1 1", kLimits);
    CHECK(g.sampling.greedy() && !g.sampling.seed && !g.sampling.has_penalties() && g.logprobs == -1);
    CHECK(parse_request("GEN 1 logprobs=0 1", kLimits).logprobs == 0);
    CHECK(parse_request("GEN 1 logprobs=20 temperature=1 1", kLimits).logprobs == 20);
    Limits vision = kLimits;
    vision.vision = true;
    Request i = parse_request("GENI 2 seed=1 /tmp/a.emb 248056,248056", vision);
    CHECK(i.command == Command::geni && i.embeddings_file == "/tmp/a.emb" && i.ids.size() == 2);
    CHECK(parse_request("", kLimits).command == Command::blank);
    CHECK(parse_request("   ", kLimits).command == Command::blank);
    CHECK(parse_request("STOP", kLimits).command == Command::stop);
    CHECK(parse_request("QUIT\r", kLimits).command == Command::quit);
    // Exactly at the context is fine; one more is not.
    std::string ids = "1";
    for (int k = 1; k < 4000; ++k) ids += ",1";
    CHECK(parse_request("GEN 96 " + ids, kLimits).ids.size() == 4000);
    bool threw = false;
    try { parse_request("GEN 97 " + ids, kLimits); } catch (const strata::Error& e) {
        threw = std::string(e.what()) == "prompt of 4000 tokens plus max_new 97 exceeds the context of 4096 tokens";
    }
    CHECK(threw);
    // A huge bad field is quoted short.
    try { parse_request("GEN 1 " + std::string(5000, 'z') + " 1", kLimits); } catch (const strata::Error& e) {
        CHECK(std::string(e.what()).size() < 100);
    }
}

static void test_formats() {
    CHECK(format_info("kv format", "fp16 x") == "INFO kv_format=fp16_x");
    CHECK(format_ready(4096) == "READY 4096 stop");
    CHECK(format_resume(12) == "RESUME 12");
    CHECK(format_pp(10, 20, 12.345, 810.04) == "PP 10 20 12.3 810.0");
    CHECK(format_reused(3) == "REUSED 3");
    CHECK(format_token(248046) == "T 248046");
    strata::TokenLogprobs lp;
    lp.logprob = -0.125f;
    CHECK(format_token(7, lp) == "T 7 -0.125");
    lp.top = {{7, -0.125f}, {3, -2.5f}, {9, -std::numeric_limits<float>::infinity()}};
    CHECK(format_token(7, lp) == "T 7 -0.125 7:-0.125,3:-2.5,9:-1e+30");
    DoneStats d;
    d.generated = 5; d.prompt = 9; d.prompt_ms = 1.25; d.decode_ms = 40; d.finish = Finish::cancel;
    d.reused = 4; d.cache_hits = 7; d.cache_lookups = 8;
    CHECK(format_done(d) == "DONE 5 9 1.2 40.0 cancel 0 0 4 7 8");
    d.extra = {{"cpu_ms", 12.34}, {"cpu_bytes", 5529600}};   // optional counters after the ten fields
    CHECK(format_done(d) == "DONE 5 9 1.2 40.0 cancel 0 0 4 7 8 cpu_ms=12.3 cpu_bytes=5529600");
    CHECK(format_err("two\nlines") == "ERR two lines");
    CHECK(golden::matches("PP * 3 * *", "PP 3 3 1.0 2.0"));
    CHECK(!golden::matches("PP * 3 * *", "PP 3 4 1.0 2.0"));
}

// token_logprobs: log_softmax of the raw row; the n best, ties to the lower id.
static void test_logprobs() {
    const float row[6] = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f, -INFINITY};
    double z = 0;
    for (float v : row) z += std::exp((double)v);
    const double log_z = std::log(z);
    strata::TokenLogprobs lp = strata::token_logprobs(row, 6, 4, 3);
    CHECK(std::fabs(lp.logprob - (0.5 - log_z)) < 1e-6);
    CHECK(lp.top.size() == 3 && lp.top[0].first == 1 && lp.top[1].first == 3 && lp.top[2].first == 0);
    CHECK(std::fabs(lp.top[0].second - (3.0 - log_z)) < 1e-6 && lp.top[0].second == lp.top[1].second);
    CHECK(strata::token_logprobs(row, 6, 5, 0).top.empty() && std::isinf(strata::token_logprobs(row, 6, 5, 0).logprob));
    double total = 0;   // every alternative of a small row: the probabilities sum to 1
    for (const auto& [id, v] : strata::token_logprobs(row, 6, 0, 6).top) total += std::exp((double)v);
    CHECK(std::fabs(total - 1.0) < 1e-6);
}

int main() {
    test_golden_requests();
    test_fields();
    test_logprobs();
    test_formats();
    return test::exit_code();
}
