// Grammars (docs/grammar.md): parse errors and their messages, byte-level matching of UTF-8 (classes, negation,
// characters split across feeds), repetition bounds, long right-recursive texts, base64url, the byte-level vocabulary
// table, and the constraint on the sampler: the best allowed token, stops only where the text is complete, the slow
// path past the best 64, the trigger token.
#include <algorithm>
#include <string>
#include <vector>

#include "check.h"
#include "common/error.h"
#include "generate/grammar.h"
#include "generate/grammar_constraint.h"
#include "generate/sampler.h"
#include "generate/vocabulary.h"

using namespace strata;

static std::string parse_error(const std::string& text) {
    try {
        Grammar::parse(text);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

// "complete", "prefix" or "rejected at N", feeding one byte at a time.
static std::string match(const std::shared_ptr<const Grammar>& g, const std::string& text) {
    GrammarMatcher m(g);
    for (size_t i = 0; i < text.size(); ++i)
        if (!m.accept(text.substr(i, 1))) return "rejected at " + std::to_string(i);
    return m.complete() ? "complete" : "prefix";
}

static const char* kJson = R"(# a small JSON object
root   ::= ws "{" ws "\"name\"" ws ":" ws string ws "," ws "\"tags\"" ws ":" ws tags ws "}" ws
tags   ::= "[" ws ( string ( ws "," ws string ){0,3} )? ws "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ["\\/bfnrt] | "\\u" [0-9a-fA-F]{4} )* "\""
ws     ::= [ \t\n]{0,8}
)";

static void test_errors() {
    auto has = [](const std::string& msg, const std::string& part) {
        CHECK_MSG(msg.find(part) != std::string::npos, "'%s' lacks '%s'", msg.c_str(), part.c_str());
    };
    has(parse_error("root ::= foo\n"), "the rule 'foo' is used but not defined (line 1, column 10)");
    has(parse_error("a ::= \"x\"\n"), "no rule named 'root'");
    has(parse_error("root ::= \"abc\n"), "a literal is not closed");
    has(parse_error("root ::= [abc\n"), "a character class is not closed");
    has(parse_error("root ::= (\"a\" | \"b\"\n"), "a group '(' is not closed");
    has(parse_error("root ::= a\na ::= a \"x\" | \"y\"\n"), "can reach itself without reading a character");
    has(parse_error("root ::= (\"a\"?)*\n"), "can reach itself without reading a character");
    has(parse_error("root ::= \"a\"{3,2}\n"), "n < m");
    has(parse_error("root ::= \"a\"{1001}\n"), "above 1000");
    has(parse_error("root ::= \"a\"\nroot ::= \"b\"\n"), "defined twice");
    has(parse_error("root ::= \"\\q\"\n"), "unknown escape");
    has(parse_error("root ::= [z-a]\n"), "runs backwards");
    has(parse_error("root ::= \"a\"**\n"), "two repetitions in a row");
    has(parse_error("root ::= \"a\" @\n"), "unexpected character '@' (line 1, column 14)");
    has(parse_error("\n\nroot ::= x\n"), "(line 3, column 10)");
    CHECK(parse_error(kJson).empty());
}

static void test_matching() {
    auto g = Grammar::parse(kJson);
    CHECK(match(g, R"({"name": "Ünïcødé ☃ 𝄞", "tags": ["a", "b\"c", "\u00e9"]})") == "complete");
    CHECK(match(g, "\n\n{\"name\":\"x\",\"tags\":[]}\n") == "complete");
    CHECK(match(g, R"({"name": "x", "tags": ["a")") == "prefix");
    CHECK(match(g, R"({"name": "x", "tags": ["a","b","c","d","e"]})") == "rejected at 38");   // at most 4 tags
    CHECK(match(g, "{\"name\": \"a\nb\"") == "rejected at 11");                               // raw control char
    CHECK(match(g, R"({"name": 5})") == "rejected at 9");
    CHECK(match(g, R"({"tags": [], "name": "x"})") == "rejected at 2");

    // A class with non-ASCII members and ranges, and its negation: multi-byte characters match whole.
    auto greek = Grammar::parse("root ::= [α-ωA]+\n");
    CHECK(match(greek, "αβωA") == "complete");
    CHECK(match(greek, "αψ") == "complete");
    CHECK(match(greek, "Ω") == "rejected at 1");   // U+03A9 shares its first byte with α..ο
    auto not_quote = Grammar::parse("root ::= [^\"]+\n");
    CHECK(match(not_quote, "€𝄞x\xC3\xA9") == "complete");
    CHECK(match(not_quote, "x\"") == "rejected at 1");
    CHECK(match(not_quote, "\xC3") == "prefix");               // a character cut in the middle
    CHECK(match(not_quote, "\xC3x") == "rejected at 1");       // … then not continued
    CHECK(match(not_quote, "\xFF") == "rejected at 0");        // never UTF-8
    auto any = Grammar::parse("root ::= \"<\" . \">\"\n");
    CHECK(match(any, "<\xF0\x9F\x98\x80>") == "complete");
    CHECK(match(any, "<ab>") == "rejected at 2");

    // Repetition bounds and an empty alternative.
    auto rep = Grammar::parse("root ::= \"a\"{2,4} tail\ntail ::= \"b\" | \n");
    CHECK(match(rep, "a") == "prefix");
    CHECK(match(rep, "aa") == "complete");
    CHECK(match(rep, "aaaab") == "complete");
    CHECK(match(rep, "aaaaa") == "rejected at 4");
    CHECK(match(rep, "aab") == "complete");
    CHECK(match(rep, "ab") == "rejected at 1");

    // A long text of a right-recursive repetition keeps one short stack (no growth per character).
    auto star = Grammar::parse("root ::= \"\\\"\" [a-z]* \"\\\"\"\n");
    std::string long_text = "\"" + std::string(200000, 'q') + "\"";
    CHECK(match(star, long_text) == "complete");

    // accept() of a multi-byte chunk is all or nothing; allows() does not move the matcher.
    GrammarMatcher m(g);
    CHECK(m.allows("{\"na"));
    CHECK(!m.allows("{\"x"));
    CHECK(!m.accept("{\"x"));
    CHECK(m.accept("{\"name"));
    CHECK(!m.complete() && m.can_continue());
    CHECK(m.first_bytes().has('"') && !m.first_bytes().has('x'));
}

static void test_base64url() {
    CHECK(decode_base64url("cm9vdCA6Oj0gImEi") == "root ::= \"a\"");
    CHECK(decode_base64url("YQ") == "a");
    CHECK(decode_base64url("YQ==") == "a");
    CHECK(decode_base64url("-_8") == std::string("\xfb\xff", 2));
    CHECK(decode_base64url("+/8") == std::string("\xfb\xff", 2));
    bool threw = false;
    try { decode_base64url("a b"); } catch (const Error&) { threw = true; }
    CHECK(threw);
    threw = false;
    try { decode_base64url("abcde"); } catch (const Error&) { threw = true; }
    CHECK(threw);
}

static void test_byte_level() {
    std::string out;
    CHECK(decode_byte_level("hello", out) && out == "hello");
    CHECK(decode_byte_level("\xC4\xA0world", out) && out == " world");   // Ġ = U+0120 = the space byte
    CHECK(decode_byte_level("\xC4\x8A", out) && out == "\n");            // Ċ = U+010A = newline
    CHECK(decode_byte_level("\xC3\xA2\xC4\xA4\xC2\xAC", out) && out == "\xE2\x82\xAC");   // "€" as three bytes
    CHECK(!decode_byte_level("\xE2\x82\xAC", out));                    // a raw "€" is not a byte-level token
}

// A vocabulary of single characters and a few longer tokens; ids 0 and 1 are stops, 2 a control token.
static Vocabulary small_vocab() {
    Vocabulary v;
    std::vector<std::string> t = {"", "", "", "{", "}", "\"", "a", "b", ":", " ", "{\"", "ab\"", "</think>", "x"};
    v.bytes = t;
    v.is_text.assign(t.size(), 1);
    v.is_text[0] = v.is_text[1] = v.is_text[2] = 0;
    v.index();
    return v;
}

static void test_constraint() {
    auto g = Grammar::parse("root ::= \"{\" \"\\\"\" [ab]+ \"\\\"\" \"}\"\n");
    Vocabulary v = small_vocab();
    GrammarConstraint c(g, v, {0, 1});
    const int n = static_cast<int>(v.size());
    CHECK(c.allows(3) && c.allows(10) && !c.allows(4) && !c.allows(0) && !c.allows(2) && !c.allows(13));

    // Greedy: the best allowed token, though the model prefers others.
    std::vector<float> logits(n, 0.0f);
    logits[13] = 9;   // "x": not allowed
    logits[0] = 8;    // a stop: not allowed before the text is complete
    logits[10] = 2;   // "{\"": allowed
    logits[3] = 1;    // "{": allowed, worse
    Sampler greedy(SamplingParams{});
    CHECK(greedy.sample(logits.data(), n, {}, &c) == 10);
    c.accept(10);
    CHECK(!c.allows(5) && c.allows(6) && c.allows(11));
    c.accept(11);     // ab"
    CHECK(c.allows(4) && !c.allows(0));
    c.accept(4);      // }
    CHECK(c.allows(0) && c.allows(1) && !c.allows(6));   // complete: only stops
    logits.assign(n, 0.0f);
    logits[6] = 5;
    logits[1] = 1;
    CHECK(greedy.sample(logits.data(), n, {}, &c) == 1);
    bool threw = false;
    try { c.accept(6); } catch (const Error&) { threw = true; }
    CHECK(threw);

    // Sampling keeps only allowed candidates, whatever the seed.
    GrammarConstraint c2(g, v, {0, 1});
    SamplingParams sp;
    sp.temperature = 1.5;
    sp.seed = 7;
    Sampler s(sp);
    std::vector<float> flat(n, 1.0f);
    for (int i = 0; i < 200; ++i) {
        int t = s.sample(flat.data(), n, {}, &c2);
        CHECK(t == 3 || t == 10);
    }

    // Nothing allowed: an error, not a silent pick.
    auto only_z = Grammar::parse("root ::= \"z\"\n");
    GrammarConstraint c3(only_z, v, {0, 1});
    threw = false;
    try { greedy.sample(flat.data(), n, {}, &c3); } catch (const Error&) { threw = true; }
    CHECK(threw);

    // The trigger: free until </think> was generated, then the grammar.
    GrammarConstraint c4(g, v, {0, 1}, 12);
    CHECK(!c4.active() && c4.allows(13) && c4.allows(0));
    c4.accept(13);
    CHECK(!c4.active());
    c4.accept(12);
    CHECK(c4.active() && !c4.allows(13) && c4.allows(3));
}

// The slow path: none of the best 64 is allowed, so the search goes on through the whole vocabulary in order.
struct OnlyIds : TokenFilter {
    std::vector<int32_t> ids;
    bool may_allow(int32_t id) const override { return allows(id); }
    bool allows(int32_t id) const override {
        for (int32_t x : ids) if (x == id) return true;
        return false;
    }
};

static void test_slow_path() {
    const int n = 5000;
    std::vector<float> logits(n);
    for (int i = 0; i < n; ++i) logits[i] = static_cast<float>(i % 977);
    OnlyIds f;
    f.ids = {17, 4000, 977 + 500};   // logits 17, 92, 500: 500 is the best allowed
    std::vector<Candidate> out, scratch;
    top_allowed(logits.data(), n, {}, 2, f, out, scratch);
    CHECK(out.size() == 2 && out[0].id == 977 + 500 && out[1].id == 4000);
    Sampler greedy(SamplingParams{});
    CHECK(greedy.sample(logits.data(), n, {}, &f) == 977 + 500);
    // Past the first windows of the search: 70 allowed tokens spread over the order, k = 64 of them in order.
    f.ids.clear();
    for (int i = 0; i < 70; ++i) f.ids.push_back(i * 71);
    top_allowed(logits.data(), n, {}, 64, f, out, scratch);
    CHECK(out.size() == 64);
    for (size_t i = 1; i < out.size(); ++i)
        CHECK(out[i - 1].logit > out[i].logit || (out[i - 1].logit == out[i].logit && out[i - 1].id < out[i].id));
    std::vector<float> all_logits;
    for (int32_t id : f.ids) all_logits.push_back(logits[id]);
    std::sort(all_logits.rbegin(), all_logits.rend());
    CHECK(out[63].logit == all_logits[63]);
}

// The slow path over the grammar's candidate ids (tokens by first byte) picks what a scan of every id picks.
struct WithoutCandidates : TokenFilter {
    const GrammarConstraint& c;
    explicit WithoutCandidates(const GrammarConstraint& g) : c(g) {}
    bool may_allow(int32_t id) const override { return c.may_allow(id); }
    bool allows(int32_t id) const override { return c.allows(id); }
};

static void test_candidate_ids() {
    Vocabulary v;
    const int n = 6000;
    for (int i = 0; i < n; ++i) {
        const char first = "abcz 0123456789"[i % 15];
        v.bytes.push_back(std::string(1, first) + std::to_string(i % 97));
        v.is_text.push_back(i >= 2);
    }
    v.index();
    auto g = Grammar::parse("root ::= \"z\" [0-9]* | \"q\"\n");
    GrammarConstraint c(g, v, {0, 1});
    std::vector<int32_t> ids;
    CHECK(c.candidate_ids(ids));
    CHECK(!ids.empty() && std::all_of(ids.begin(), ids.end(), [&](int32_t id) { return v.bytes[id][0] == 'z'; }));
    std::vector<float> logits(n);
    for (int i = 0; i < n; ++i) logits[i] = v.bytes[i][0] == 'a' ? 5.0f + (i % 13) : (float)((i * 7919) % 1000) / 997.0f;
    std::vector<Candidate> a, b, scratch;
    top_allowed(logits.data(), n, {}, 20, c, a, scratch);
    top_allowed(logits.data(), n, {}, 20, WithoutCandidates(c), b, scratch);
    CHECK(a.size() == 20 && b.size() == 20);
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) CHECK(a[i].id == b[i].id && v.bytes[a[i].id][0] == 'z');
    c.accept(a[0].id);   // "z<digits>": complete, so the stops are candidates too
    CHECK(c.candidate_ids(ids) && std::count(ids.begin(), ids.end(), 0) == 1 && std::count(ids.begin(), ids.end(), 1) == 1);
}

int main() {
    test_candidate_ids();
    test_errors();
    test_matching();
    test_base64url();
    test_byte_level();
    test_constraint();
    test_slow_path();
    return test::exit_code();
}
