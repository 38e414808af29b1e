// Parsing of GEN / GENI / STOP / QUIT lines with the exact ERR messages of protocol.md §6, and the output formats.
#include "serve/protocol.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "common/error.h"

namespace strata::serve {

namespace {

std::vector<std::string_view> split(std::string_view s, char sep, bool skip_empty) {
    std::vector<std::string_view> out;
    size_t start = 0;
    while (true) {
        size_t end = s.find(sep, start);
        std::string_view piece = s.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
        if (!(skip_empty && piece.empty())) out.push_back(piece);
        if (end == std::string_view::npos) break;
        start = end + 1;
    }
    return out;
}

// Keeps messages one short line even when the offending field is a megabyte of ids.
std::string quoted(std::string_view s) {
    constexpr size_t kMax = 40;
    std::string out = "'";
    out += s.size() > kMax ? std::string(s.substr(0, kMax)) + "..." : std::string(s);
    return out + "'";
}

bool all_digits(std::string_view s) {
    if (s.empty()) return false;
    for (char c : s)
        if (c < '0' || c > '9') return false;
    return true;
}

bool parse_int(std::string_view s, int64_t& v) {
    if (s.empty()) return false;
    auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

bool parse_number(std::string_view s, double& v) {
    if (s.empty()) return false;
    auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    return r.ec == std::errc() && r.ptr == s.data() + s.size() && std::isfinite(v);
}

[[noreturn]] void bad_value(std::string_view value, std::string_view key, std::string_view expected) {
    fail("bad value ", quoted(value), " for ", key, " (expected ", expected, ")");
}

double number_in(std::string_view key, std::string_view value, double lo, double hi, bool lo_open,
                 std::string_view expected) {
    double v = 0;
    if (!parse_number(value, v) || v > hi || v < lo || (lo_open && v == lo)) bad_value(value, key, expected);
    return v;
}

int64_t integer_in(std::string_view key, std::string_view value, int64_t lo, int64_t hi, std::string_view expected) {
    int64_t v = 0;
    if (!parse_int(value, v) || v < lo || v > hi) bad_value(value, key, expected);
    return v;
}

void apply_key(SamplingParams& p, std::string_view key, std::string_view value) {
    constexpr double kInf = std::numeric_limits<double>::infinity();
    if (key == "temperature") {
        p.temperature = number_in(key, value, 0, kInf, false, "a number >= 0");
    } else if (key == "top_k") {
        p.top_k = static_cast<int>(integer_in(key, value, 0, kMaxTopK, "an integer 0..64"));
    } else if (key == "top_p") {
        p.top_p = number_in(key, value, 0, 1, true, "a number 0 < p <= 1");
    } else if (key == "min_p") {
        p.min_p = number_in(key, value, 0, 1, false, "a number 0..1");
    } else if (key == "repeat_penalty") {
        p.repeat_penalty = number_in(key, value, 0, kInf, true, "a number > 0");
    } else if (key == "frequency_penalty") {
        p.frequency_penalty = number_in(key, value, -2, 2, false, "a number -2..2");
    } else if (key == "presence_penalty") {
        p.presence_penalty = number_in(key, value, -2, 2, false, "a number -2..2");
    } else if (key == "penalty_window") {
        p.penalty_window = static_cast<int>(integer_in(key, value, 1, 1048576, "an integer 1..1048576"));
    } else if (key == "seed") {
        uint64_t v = 0;
        auto r = std::from_chars(value.data(), value.data() + value.size(), v);
        if (!all_digits(value) || r.ec != std::errc() || r.ptr != value.data() + value.size())
            bad_value(value, key, "an integer 0..18446744073709551615");
        p.seed = v;
    }
    // Unknown keys are ignored (protocol.md §3), so newer gateways can talk to older engines.
}

std::vector<int32_t> parse_ids(std::string_view field, int vocab_size) {
    std::vector<std::string_view> pieces = split(field, ',', false);
    bool all_empty = true;
    for (auto piece : pieces) all_empty = all_empty && piece.empty();
    if (all_empty) fail("empty token list");
    std::vector<int32_t> ids;
    ids.reserve(pieces.size());
    for (size_t i = 0; i < pieces.size(); ++i) {
        std::string_view piece = pieces[i];
        if (!all_digits(piece)) fail("bad token ", quoted(piece), " at position ", i, " (expected a decimal id)");
        uint64_t v = 0;
        auto r = std::from_chars(piece.data(), piece.data() + piece.size(), v);
        if (r.ec != std::errc() || v >= static_cast<uint64_t>(vocab_size))
            fail("token id ", piece, " at position ", i, " is outside the vocabulary (0..", vocab_size - 1, ")");
        ids.push_back(static_cast<int32_t>(v));
    }
    return ids;
}

// grammar=<base64url of the grammar's text> (docs/grammar.md).
std::shared_ptr<const Grammar> parse_grammar(std::string_view value) {
    constexpr size_t kMaxGrammarBytes = size_t(1) << 20;
    std::string text;
    try {
        text = decode_base64url(value);
    } catch (const Error& e) {
        fail("bad value for grammar (expected the grammar's text in base64url): ", e.what());
    }
    if (text.size() > kMaxGrammarBytes) fail("bad grammar: longer than ", kMaxGrammarBytes, " bytes");
    return Grammar::parse(text);
}

}  // namespace

Request parse_request(std::string_view line, const Limits& limits) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::vector<std::string_view> fields = split(line, ' ', true);
    Request req;
    if (fields.empty()) return req;
    std::string_view cmd = fields[0];
    if (cmd == "STOP") { req.command = Command::stop; return req; }
    if (cmd == "QUIT") { req.command = Command::quit; return req; }
    if (cmd != "GEN" && cmd != "GENI")
        fail("unknown command ", quoted(cmd), " (expected GEN, GENI, STOP or QUIT)");
    bool image = cmd == "GENI";
    req.command = image ? Command::geni : Command::gen;
    size_t fixed = image ? 3 : 2;  // max_new, [embeddings file,] ids
    if (fields.size() < 1 + fixed) {
        if (image) fail("GENI needs <max_new>, an embeddings file and a token list");
        fail("GEN needs <max_new> and a token list");
    }
    int64_t max_new = 0;
    if (!parse_int(fields[1], max_new) || max_new < 1 || max_new > std::numeric_limits<int32_t>::max())
        fail("bad max_new ", quoted(fields[1]), " (expected an integer >= 1)");
    req.max_new = static_cast<int>(max_new);

    size_t key_end = fields.size() - (image ? 2 : 1);
    for (size_t i = 2; i < key_end; ++i) {
        size_t eq = fields[i].find('=');
        if (eq == std::string_view::npos) fail("bad field ", quoted(fields[i]), " (expected key=value)");
        const std::string_view key = fields[i].substr(0, eq), value = fields[i].substr(eq + 1);
        if (key == "logprobs")
            req.logprobs = static_cast<int>(integer_in(key, value, 0, kMaxTopLogprobs, "an integer 0..20"));
        else if (key == "grammar")
            req.grammar = parse_grammar(value);
        else if (key == "grammar_after")
            req.grammar_after = static_cast<int32_t>(integer_in(key, value, 0, limits.vocab_size - 1, "a token id"));
        else
            apply_key(req.sampling, key, value);
    }
    if (image) req.embeddings_file = std::string(fields[fields.size() - 2]);
    req.ids = parse_ids(fields.back(), limits.vocab_size);

    int64_t need = static_cast<int64_t>(req.ids.size()) + req.max_new;
    if (need > limits.context_length)
        fail("prompt of ", req.ids.size(), " tokens plus max_new ", req.max_new, " exceeds the context of ",
             limits.context_length, " tokens");
    if (image && !limits.vision) fail("GENI needs an engine started with --vision");
    return req;
}

namespace {
std::string one_line(std::string_view s, char replacement_for_space) {
    std::string out(s);
    for (char& c : out) {
        if (c == '\n' || c == '\r') c = ' ';
        if (replacement_for_space && c == ' ') c = replacement_for_space;
    }
    return out;
}

std::string decimal1(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f", std::isfinite(v) && v > 0 ? v : 0.0);
    return buf;
}
}  // namespace

std::string format_info(std::string_view key, std::string_view value) {
    return "INFO " + one_line(key, '_') + "=" + one_line(value, '_');
}
std::string format_ready(int max_context) { return fmt("READY ", max_context, " stop"); }
std::string format_resume(int reused) { return fmt("RESUME ", reused); }
std::string format_pp(int reached, int total, double ms, double tokens_per_s) {
    return fmt("PP ", reached, " ", total, " ", decimal1(ms), " ", decimal1(tokens_per_s));
}
std::string format_reused(int reused) { return fmt("REUSED ", reused); }
std::string format_token(int32_t id) { return fmt("T ", id); }
std::string format_token(int32_t id, const TokenLogprobs& lp) {
    auto number = [](float v) {   // 6 significant digits; -inf (a logit of -inf) as a large finite value
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.6g", std::isfinite(v) ? v : -1e30f);
        return std::string(buf);
    };
    std::string s = fmt("T ", id, " ", number(lp.logprob));
    for (size_t i = 0; i < lp.top.size(); ++i)
        s += fmt(i ? "," : " ", lp.top[i].first, ":", number(lp.top[i].second));
    return s;
}

const char* finish_name(Finish finish) {
    switch (finish) {
        case Finish::stop: return "stop";
        case Finish::length: return "length";
        case Finish::cancel: return "cancel";
    }
    return "stop";
}

namespace {
std::string format_extra(const std::vector<std::pair<std::string, double>>& extra) {
    std::string s;
    for (const auto& [key, value] : extra) {
        const bool ms = key.size() > 3 && key.compare(key.size() - 3, 3, "_ms") == 0;
        s += " " + key + "=" + (ms ? decimal1(value) : std::to_string(std::llround(value)));
    }
    return s;
}
}  // namespace

std::string format_done(const DoneStats& d) {
    return fmt("DONE ", d.generated, " ", d.prompt, " ", decimal1(d.prompt_ms), " ", decimal1(d.decode_ms), " ",
               finish_name(d.finish), " ", d.drafts_accepted, " ", d.drafts_offered, " ", d.reused, " ",
               d.cache_hits, " ", d.cache_lookups) + format_extra(d.extra);
}

std::string format_err(std::string_view message) { return "ERR " + one_line(message, 0); }

}  // namespace strata::serve
