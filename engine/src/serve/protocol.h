// The serve protocol's pure half (protocol.md): request line → Request, events → output lines. No I/O here;
// serve_loop.cpp does the reading and writing.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "generate/grammar.h"
#include "generate/logprobs.h"
#include "generate/sampler.h"

namespace strata::serve {

enum class Command { blank, gen, geni, stop, quit };

struct Request {
    Command command = Command::blank;
    int max_new = 0;
    SamplingParams sampling;
    int logprobs = -1;            // logprobs=N: each T line carries the token's logprob and N alternatives; -1: off
    std::shared_ptr<const Grammar> grammar;   // grammar=: the output must match it (docs/grammar.md); null: free
    int32_t grammar_after = -1;   // grammar_after=: the grammar starts after this token is generated; -1: at once
    std::string embeddings_file;  // GENI only
    std::vector<int32_t> ids;     // the whole prompt
};

// What a request is checked against.
struct Limits {
    int vocab_size = 0;
    int context_length = 0;  // prompt + max_new must fit
    bool vision = false;     // GENI accepted
};

// Parses and validates one input line. Throws strata::Error whose message is the ERR body of protocol.md §6.
Request parse_request(std::string_view line, const Limits& limits);

enum class Finish { stop, length, cancel };

struct DoneStats {
    int generated = 0;
    int prompt = 0;
    double prompt_ms = 0;
    double decode_ms = 0;
    Finish finish = Finish::length;
    int drafts_accepted = 0;
    int drafts_offered = 0;
    int reused = 0;
    int64_t cache_hits = 0;
    int64_t cache_lookups = 0;
    // Optional key=value fields after the ten (protocol.md §4); a key ending in _ms is written with one decimal.
    std::vector<std::pair<std::string, double>> extra;
};

// Output lines, without the trailing newline.
std::string format_info(std::string_view key, std::string_view value);  // spaces/newlines in value → '_'
std::string format_ready(int max_context);
std::string format_resume(int reused);
std::string format_pp(int reached, int total, double ms, double tokens_per_s);
std::string format_reused(int reused);
std::string format_token(int32_t id);
std::string format_token(int32_t id, const TokenLogprobs& lp);   // T <id> <logprob> [<id>:<logprob>,…]
std::string format_done(const DoneStats& done);
std::string format_err(std::string_view message);  // newlines in message → ' '
const char* finish_name(Finish finish);

}  // namespace strata::serve
