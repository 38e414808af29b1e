// The grammar language of docs/grammar.md: parsed into rules of items, compiled to byte-level alternatives (a
// character class becomes one alternative per UTF-8 byte-range sequence, repetitions become right-recursive rules),
// and matched with a set of parse stacks, as llama.cpp's grammar sampler does.
#include "generate/grammar.h"

#include <algorithm>
#include <functional>
#include <map>
#include <utility>

#include "common/error.h"

namespace strata {

namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr int kMaxRepeat = 1000;             // m and n of {m,n}
constexpr size_t kMaxElems = size_t(1) << 22;  // compiled size cap (a grammar of {1000} of {1000} fails here)
constexpr size_t kMaxStacks = 20000;         // parse stacks alive at once
constexpr int kMaxDepth = 10000;             // expansion depth without consuming a byte

using Range = std::pair<uint32_t, uint32_t>;   // code points lo..hi

// One parsed item: an atom with its repetition count.
struct Item;
using Sequence = std::vector<Item>;
using Alternatives = std::vector<Sequence>;
struct Item {
    enum class Kind { literal, cls, ref, group } kind = Kind::literal;
    std::vector<uint32_t> chars;   // literal: code points
    std::vector<Range> ranges;     // cls: the code points it matches (negation already applied)
    std::string name;              // ref
    size_t at = 0;                 // ref: where it was written (for "undefined rule")
    Alternatives group;            // group
    int min = 1, max = 1;          // max −1 = unbounded
};

struct ParsedRule {
    std::string name;
    size_t at = 0;
    Alternatives alts;
};

// Line and column (1-based) of a byte offset.
std::string where(std::string_view text, size_t at) {
    at = std::min(at, text.size());
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at; ++i) {
        if (text[i] == '\n') { ++line; col = 1; } else { ++col; }
    }
    return fmt("line ", line, ", column ", col);
}

[[noreturn]] void bad(std::string_view text, size_t at, const std::string& why) {
    fail("bad grammar: ", why, " (", where(text, at), ")");
}

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class Parser {
public:
    explicit Parser(std::string_view text) : s_(text) {}

    std::vector<ParsedRule> parse() {
        std::vector<ParsedRule> rules;
        skip_space();
        while (i_ < s_.size()) {
            ParsedRule r;
            r.at = i_;
            r.name = name();
            if (r.name.empty()) bad(s_, i_, "expected a rule name");
            skip_space();
            if (s_.substr(i_, 3) != "::=") bad(s_, i_, fmt("expected '::=' after the rule name '", r.name, "'"));
            i_ += 3;
            skip_space();
            r.alts = alternatives(false);
            rules.push_back(std::move(r));
        }
        if (rules.empty()) bad(s_, 0, "no rules");
        return rules;
    }

private:
    std::string name() {
        size_t b = i_;
        while (i_ < s_.size() && is_name_char(s_[i_])) ++i_;
        return std::string(s_.substr(b, i_ - b));
    }

    void skip_space() {
        while (i_ < s_.size()) {
            char c = s_[i_];
            if (c == ' ' || c == '\t' || c == '\n' || c == '\r') { ++i_; continue; }
            if (c == '#') {
                while (i_ < s_.size() && s_[i_] != '\n') ++i_;
                continue;
            }
            break;
        }
    }

    // At a rule name followed by "::=": the current rule's body has ended.
    bool at_rule_start() const {
        size_t j = i_;
        while (j < s_.size() && is_name_char(s_[j])) ++j;
        if (j == i_) return false;
        while (j < s_.size() && (s_[j] == ' ' || s_[j] == '\t' || s_[j] == '\n' || s_[j] == '\r')) ++j;
        return s_.substr(j, 3) == "::=";
    }

    Alternatives alternatives(bool nested) {
        Alternatives alts;
        alts.push_back(sequence(nested));
        while (i_ < s_.size() && s_[i_] == '|') {
            ++i_;
            skip_space();
            alts.push_back(sequence(nested));
        }
        return alts;
    }

    Sequence sequence(bool nested) {
        Sequence seq;
        while (i_ < s_.size()) {
            char c = s_[i_];
            if (c == '|' || c == ')') break;
            if (!nested && at_rule_start()) break;
            Item item = atom();
            skip_space();
            postfix(item);
            seq.push_back(std::move(item));
        }
        return seq;
    }

    Item atom() {
        Item item;
        const size_t at = i_;
        char c = s_[i_];
        if (c == '"') {
            ++i_;
            item.kind = Item::Kind::literal;
            while (true) {
                if (i_ >= s_.size()) bad(s_, at, "a literal is not closed (missing '\"')");
                if (s_[i_] == '"') { ++i_; break; }
                item.chars.push_back(character());
            }
        } else if (c == '[') {
            ++i_;
            item.kind = Item::Kind::cls;
            bool negated = i_ < s_.size() && s_[i_] == '^';
            if (negated) ++i_;
            std::vector<Range> ranges;
            while (true) {
                if (i_ >= s_.size()) bad(s_, at, "a character class is not closed (missing ']')");
                if (s_[i_] == ']') { ++i_; break; }
                uint32_t lo = character(), hi = lo;
                if (i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
                    ++i_;
                    hi = character();
                    if (hi < lo) bad(s_, at, "a range in a character class runs backwards");
                }
                ranges.push_back({lo, hi});
            }
            item.ranges = normalise(std::move(ranges), negated);
            if (item.ranges.empty()) bad(s_, at, "a character class matches nothing");
        } else if (c == '.') {
            ++i_;
            item.kind = Item::Kind::cls;
            item.ranges = {{0, kMaxCodePoint}};
        } else if (c == '(') {
            ++i_;
            skip_space();
            item.kind = Item::Kind::group;
            item.group = alternatives(true);
            if (i_ >= s_.size() || s_[i_] != ')') bad(s_, at, "a group '(' is not closed");
            ++i_;
        } else if (is_name_char(c)) {
            item.kind = Item::Kind::ref;
            item.at = at;
            item.name = name();
        } else {
            bad(s_, at, fmt("unexpected character '", c, "'"));
        }
        return item;
    }

    void postfix(Item& item) {
        if (i_ >= s_.size()) return;
        const size_t at = i_;
        char c = s_[i_];
        if (c == '*') { item.min = 0; item.max = -1; }
        else if (c == '+') { item.min = 1; item.max = -1; }
        else if (c == '?') { item.min = 0; item.max = 1; }
        else if (c == '{') {
            ++i_;
            skip_space();
            int m = count(at);
            int n = m;
            skip_space();
            if (i_ < s_.size() && s_[i_] == ',') {
                ++i_;
                skip_space();
                n = (i_ < s_.size() && s_[i_] == '}') ? -1 : count(at);
                skip_space();
            }
            if (i_ >= s_.size() || s_[i_] != '}') bad(s_, at, "a repetition '{' is not closed");
            if (n >= 0 && n < m) bad(s_, at, "a repetition {m,n} with n < m");
            item.min = m;
            item.max = n;
        } else {
            return;
        }
        ++i_;
        skip_space();
        if (i_ < s_.size() && (s_[i_] == '*' || s_[i_] == '+' || s_[i_] == '?' || s_[i_] == '{'))
            bad(s_, i_, "two repetitions in a row (use a group)");
    }

    int count(size_t at) {
        size_t b = i_;
        int64_t v = 0;
        while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9' && v <= kMaxRepeat) v = v * 10 + (s_[i_++] - '0');
        if (i_ == b) bad(s_, at, "expected a number in a repetition");
        if (v > kMaxRepeat) bad(s_, at, fmt("a repetition count above ", kMaxRepeat));
        return static_cast<int>(v);
    }

    uint32_t hex(int digits) {
        uint32_t v = 0;
        for (int k = 0; k < digits; ++k) {
            if (i_ >= s_.size()) bad(s_, i_, "a hex escape is cut short");
            char c = s_[i_++];
            int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                    : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
            if (d < 0) bad(s_, i_ - 1, "a hex escape needs hex digits");
            v = v * 16 + d;
        }
        if (v > kMaxCodePoint) bad(s_, i_, "a code point above U+10FFFF");
        return v;
    }

    // One character of a literal or class: an escape or a UTF-8 code point of the grammar's text.
    uint32_t character() {
        const size_t at = i_;
        unsigned char c = static_cast<unsigned char>(s_[i_++]);
        if (c == '\\') {
            if (i_ >= s_.size()) bad(s_, at, "an escape is cut short");
            char e = s_[i_++];
            switch (e) {
                case 'n': return '\n';
                case 'r': return '\r';
                case 't': return '\t';
                case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': return (uint8_t)e;
                case 'x': return hex(2);
                case 'u': return hex(4);
                case 'U': return hex(8);
                default: bad(s_, at, fmt("unknown escape '\\", e, "'"));
            }
        }
        if (c < 0x80) return c;
        int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
        if (extra < 0 || i_ + extra > s_.size()) bad(s_, at, "the grammar's text is not valid UTF-8");
        uint32_t v = c & (0x3F >> extra);
        for (int k = 0; k < extra; ++k) {
            unsigned char d = static_cast<unsigned char>(s_[i_++]);
            if ((d & 0xC0) != 0x80) bad(s_, at, "the grammar's text is not valid UTF-8");
            v = (v << 6) | (d & 0x3F);
        }
        return v;
    }

    // Sorted, merged ranges; the complement within 0..U+10FFFF when negated.
    static std::vector<Range> normalise(std::vector<Range> r, bool negated) {
        std::sort(r.begin(), r.end());
        std::vector<Range> merged;
        for (const Range& x : r) {
            if (!merged.empty() && x.first <= merged.back().second + 1)
                merged.back().second = std::max(merged.back().second, x.second);
            else
                merged.push_back(x);
        }
        if (!negated) return merged;
        std::vector<Range> out;
        uint32_t next = 0;
        for (const Range& x : merged) {
            if (x.first > next) out.push_back({next, x.first - 1});
            next = x.second + 1;
        }
        if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
        return out;
    }

    std::string_view s_;
    size_t i_ = 0;
};

// UTF-8 encoding of one code point.
std::string utf8(uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
        s += static_cast<char>(cp);
    } else if (cp < 0x800) {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        s += static_cast<char>(0xE0 | (cp >> 12));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        s += static_cast<char>(0xF0 | (cp >> 18));
        s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
}

// The code points lo..hi (one UTF-8 length) as sequences of byte ranges, each byte range independent of the others
// (the split of Rust's regex-syntax Utf8Sequences: cut where a trailing byte's range would not be full).
using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;
void utf8_split(uint32_t lo, uint32_t hi, std::vector<ByteRanges>& out) {
    const std::string a = utf8(lo), b = utf8(hi);
    for (size_t i = 1; i < a.size(); ++i) {
        const uint32_t m = (uint32_t(1) << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_split(lo, lo | m, out);
                utf8_split((lo | m) + 1, hi, out);
                return;
            }
            if ((hi & m) != m) {
                utf8_split(lo, (hi & ~m) - 1, out);
                utf8_split(hi & ~m, hi, out);
                return;
            }
        }
    }
    ByteRanges seq;
    for (size_t i = 0; i < a.size(); ++i) seq.push_back({(uint8_t)a[i], (uint8_t)b[i]});
    out.push_back(std::move(seq));
}

std::vector<ByteRanges> utf8_sequences(const std::vector<Range>& ranges) {
    std::vector<ByteRanges> out;
    const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodePoint};
    for (Range r : ranges) {
        uint32_t lo = r.first;
        for (uint32_t top : bounds) {
            if (lo > r.second) break;
            if (lo > top) continue;
            const uint32_t hi = std::min(r.second, top);
            utf8_split(lo, hi, out);
            lo = hi + 1;
        }
    }
    return out;
}

}  // namespace

// Compiles parsed rules into a Grammar: rules laid out as alternatives of elements.
class GrammarBuilder {
public:
    using Elem = Grammar::Elem;
    using Kind = Grammar::Kind;

    GrammarBuilder(std::string_view text, const std::vector<ParsedRule>& parsed) : text_(text) {
        for (const ParsedRule& r : parsed) {
            if (names_.count(r.name)) bad(text_, r.at, fmt("the rule '", r.name, "' is defined twice"));
            names_[r.name] = new_rule(r.name);
        }
        if (!names_.count("root")) bad(text_, 0, "no rule named 'root'");
        for (const ParsedRule& r : parsed) {
            const uint32_t id = names_[r.name];
            for (const Sequence& seq : r.alts) {
                std::vector<Elem> alt = compile(seq, r.name);   // may add rules: rules_ moves
                rules_[id].push_back(std::move(alt));
            }
        }
    }

    std::shared_ptr<const Grammar> finish() {
        check_left_recursion();
        auto g = std::make_shared<Grammar>();
        g->byte_sets_ = std::move(sets_);
        g->rule_alts_.resize(rules_.size());
        for (size_t r = 0; r < rules_.size(); ++r) {
            for (const std::vector<Elem>& alt : rules_[r]) {
                g->rule_alts_[r].push_back(static_cast<uint32_t>(g->elems_.size()));
                g->elems_.insert(g->elems_.end(), alt.begin(), alt.end());
                g->elems_.push_back({Kind::end, 0});
            }
        }
        g->root_ = names_.at("root");
        return g;
    }

private:
    uint32_t new_rule(std::string label) {
        rules_.emplace_back();
        labels_.push_back(std::move(label));
        return static_cast<uint32_t>(rules_.size() - 1);
    }

    uint32_t set_index(const ByteSet& s) {
        auto it = set_ids_.find(s.bits);
        if (it != set_ids_.end()) return it->second;
        sets_.push_back(s);
        return set_ids_[s.bits] = static_cast<uint32_t>(sets_.size() - 1);
    }

    void grow(size_t n) {
        total_ += n;
        if (total_ > kMaxElems) fail("bad grammar: it compiles to more than ", kMaxElems, " elements (lower the repetition counts)");
    }

    std::vector<Elem> compile(const Sequence& seq, const std::string& owner) {
        std::vector<Elem> out;
        for (const Item& item : seq) emit(item, owner, out);
        return out;
    }

    uint32_t anon_rule(std::vector<std::vector<Elem>> alts, const std::string& owner) {
        const uint32_t id = new_rule("a part of rule '" + owner + "'");
        rules_[id] = std::move(alts);
        return id;
    }

    // One occurrence of the item's atom.
    std::vector<Elem> atom(const Item& item, const std::string& owner) {
        std::vector<Elem> out;
        switch (item.kind) {
            case Item::Kind::literal:
                for (uint32_t cp : item.chars)
                    for (char c : utf8(cp)) {
                        ByteSet s;
                        s.add(static_cast<uint8_t>(c));
                        out.push_back({Kind::bytes, set_index(s)});
                    }
                break;
            case Item::Kind::cls: {
                // One-byte sequences merge into one set; longer ones become alternatives of a rule.
                ByteSet one;
                bool has_one = false;
                std::vector<std::vector<Elem>> alts;
                for (const ByteRanges& seq : utf8_sequences(item.ranges)) {
                    if (seq.size() == 1) {
                        one.add_range(seq[0].first, seq[0].second);
                        has_one = true;
                        continue;
                    }
                    std::vector<Elem> alt;
                    for (auto [lo, hi] : seq) {
                        ByteSet s;
                        s.add_range(lo, hi);
                        alt.push_back({Kind::bytes, set_index(s)});
                    }
                    alts.push_back(std::move(alt));
                }
                if (has_one) alts.insert(alts.begin(), std::vector<Elem>{{Kind::bytes, set_index(one)}});
                if (alts.size() == 1 && alts[0].size() == 1) out = alts[0];
                else out.push_back({Kind::rule, anon_rule(std::move(alts), owner)});
                break;
            }
            case Item::Kind::ref: {
                auto it = names_.find(item.name);
                if (it == names_.end()) bad(text_, item.at, fmt("the rule '", item.name, "' is used but not defined"));
                out.push_back({Kind::rule, it->second});
                break;
            }
            case Item::Kind::group: {
                std::vector<std::vector<Elem>> alts;
                for (const Sequence& seq : item.group) alts.push_back(compile(seq, owner));
                if (alts.size() == 1) out = std::move(alts[0]);
                else out.push_back({Kind::rule, anon_rule(std::move(alts), owner)});
                break;
            }
        }
        grow(out.size() + 1);
        return out;
    }

    void emit(const Item& item, const std::string& owner, std::vector<Elem>& out) {
        std::vector<Elem> one = atom(item, owner);
        if (item.min == 1 && item.max == 1) {
            out.insert(out.end(), one.begin(), one.end());
            return;
        }
        // A repeated unit is one element: a rule when the atom is longer.
        Elem unit = one.size() == 1 ? one[0] : Elem{Kind::rule, anon_rule({one}, owner)};
        grow(static_cast<size_t>(item.min) + 4);
        for (int k = 0; k < item.min; ++k) out.push_back(unit);
        if (item.max < 0) {   // star ::= unit star | (empty)
            const uint32_t star = new_rule("a repetition in rule '" + owner + "'");
            rules_[star] = {{unit, {Kind::rule, star}}, {}};
            out.push_back({Kind::rule, star});
        } else if (item.max > item.min) {   // opt_k ::= unit opt_{k-1} | (empty); opt_1 ::= unit | (empty)
            uint32_t opt = new_rule("a repetition in rule '" + owner + "'");
            rules_[opt] = {{unit}, {}};
            for (int k = item.min + 1; k < item.max; ++k) {
                const uint32_t outer = new_rule("a repetition in rule '" + owner + "'");
                rules_[outer] = {{unit, {Kind::rule, opt}}, {}};
                opt = outer;
            }
            grow(3 * static_cast<size_t>(item.max - item.min));
            out.push_back({Kind::rule, opt});
        }
    }

    // A rule that can reach itself without consuming a byte would expand forever.
    void check_left_recursion() {
        const size_t n = rules_.size();
        std::vector<char> nullable(n, 0);
        for (bool changed = true; changed;) {
            changed = false;
            for (size_t r = 0; r < n; ++r) {
                if (nullable[r]) continue;
                for (const auto& alt : rules_[r]) {
                    bool all = std::all_of(alt.begin(), alt.end(),
                                           [&](const Elem& e) { return e.kind == Kind::rule && nullable[e.value]; });
                    if (all) { nullable[r] = 1; changed = true; break; }
                }
            }
        }
        std::vector<std::vector<uint32_t>> calls(n);   // rules reachable at the start of an alternative
        for (size_t r = 0; r < n; ++r)
            for (const auto& alt : rules_[r])
                for (const Elem& e : alt) {
                    if (e.kind != Kind::rule) break;
                    calls[r].push_back(e.value);
                    if (!nullable[e.value]) break;
                }
        std::vector<char> state(n, 0);   // 0 new, 1 on the path, 2 done
        std::function<void(uint32_t)> visit = [&](uint32_t r) {
            state[r] = 1;
            for (uint32_t c : calls[r]) {
                if (state[c] == 1)
                    fail("bad grammar: ", labels_[c], " can reach itself without reading a character (left recursion, "
                         "or a repetition of something that can be empty)");
                if (state[c] == 0) visit(c);
            }
            state[r] = 2;
        };
        for (uint32_t r = 0; r < n; ++r)
            if (state[r] == 0) visit(r);
    }

    std::string_view text_;
    std::map<std::string, uint32_t> names_;
    std::vector<std::vector<std::vector<Elem>>> rules_;   // rule → alternatives → elements (no End)
    std::vector<std::string> labels_;                     // for messages
    std::vector<ByteSet> sets_;
    std::map<std::array<uint64_t, 4>, uint32_t> set_ids_;
    size_t total_ = 0;
};

std::shared_ptr<const Grammar> Grammar::parse(std::string_view text) {
    std::vector<ParsedRule> rules = Parser(text).parse();
    return GrammarBuilder(text, rules).finish();
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar) : g_(std::move(grammar)) {
    Stacks start;
    Stack s;
    const auto& elems = g_->elems();
    for (uint32_t alt : g_->alternatives(g_->root())) {
        s.clear();
        if (elems[alt].kind != Grammar::Kind::end) s.push_back(alt);
        expand(s, start, 0);
    }
    set_stacks(std::move(start));
}

void GrammarMatcher::expand(Stack& stack, Stacks& out, int depth) const {
    if (depth > kMaxDepth) fail("grammar: expansion deeper than ", kMaxDepth, " rules");
    const auto& elems = g_->elems();
    if (stack.empty() || elems[stack.back()].kind == Grammar::Kind::bytes) {
        out.push_back(stack);
        if (out.size() > 4 * kMaxStacks) fail("grammar: more than ", kMaxStacks, " ways to read the text");
        return;
    }
    // A rule: replace it by its continuation (unless that is the end of its alternative: right recursion stays flat)
    // and, on top, the start of each of its alternatives.
    const uint32_t pos = stack.back();
    const uint32_t rule = elems[pos].value;
    stack.pop_back();
    const bool cont = elems[pos + 1].kind != Grammar::Kind::end;
    if (cont) stack.push_back(pos + 1);
    const size_t base = stack.size();
    for (uint32_t alt : g_->alternatives(rule)) {
        if (elems[alt].kind != Grammar::Kind::end) stack.push_back(alt);
        expand(stack, out, depth + 1);
        stack.resize(base);
    }
    if (cont) stack.pop_back();
    stack.push_back(pos);
}

bool GrammarMatcher::step(const Stacks& from, uint8_t byte, Stacks& to) const {
    to.clear();
    const auto& elems = g_->elems();
    const auto& sets = g_->byte_sets();
    Stack s;
    for (const Stack& stack : from) {
        if (stack.empty()) continue;
        const uint32_t pos = stack.back();
        if (!sets[elems[pos].value].has(byte)) continue;
        s.assign(stack.begin(), stack.end() - 1);
        if (elems[pos + 1].kind != Grammar::Kind::end) s.push_back(pos + 1);
        if (!s.empty() && elems[s.back()].kind == Grammar::Kind::rule) expand(s, to, 0);
        else to.push_back(s);
    }
    std::sort(to.begin(), to.end());
    to.erase(std::unique(to.begin(), to.end()), to.end());
    if (to.size() > kMaxStacks) fail("grammar: more than ", kMaxStacks, " ways to read the text");
    return !to.empty();
}

bool GrammarMatcher::feed(std::string_view bytes, Stacks& out) const {
    if (!first_.has(static_cast<uint8_t>(bytes[0]))) return false;
    Stacks next;
    if (!step(stacks_, static_cast<uint8_t>(bytes[0]), out)) return false;
    for (size_t i = 1; i < bytes.size(); ++i) {
        if (!step(out, static_cast<uint8_t>(bytes[i]), next)) return false;
        std::swap(out, next);
    }
    return true;
}

bool GrammarMatcher::allows(std::string_view bytes) const {
    Stacks out;
    return bytes.empty() || feed(bytes, out);
}

bool GrammarMatcher::accept(std::string_view bytes) {
    if (bytes.empty()) return true;
    Stacks out;
    if (!feed(bytes, out)) return false;
    set_stacks(std::move(out));
    return true;
}

void GrammarMatcher::set_stacks(Stacks stacks) {
    std::sort(stacks.begin(), stacks.end());
    stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
    stacks_ = std::move(stacks);
    first_ = ByteSet{};
    for (const Stack& s : stacks_)
        if (!s.empty()) first_.merge(g_->byte_sets()[g_->elems()[s.back()].value]);
}

bool GrammarMatcher::complete() const {
    return std::any_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

bool GrammarMatcher::can_continue() const {
    return std::any_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return !s.empty(); });
}

std::string decode_base64url(std::string_view text) {
    auto value = [](char c) -> int {
        if (c >= 'A' && c <= 'Z') return c - 'A';
        if (c >= 'a' && c <= 'z') return c - 'a' + 26;
        if (c >= '0' && c <= '9') return c - '0' + 52;
        if (c == '-' || c == '+') return 62;
        if (c == '_' || c == '/') return 63;
        return -1;
    };
    while (!text.empty() && text.back() == '=') text.remove_suffix(1);
    if (text.size() % 4 == 1) fail("base64 text of ", text.size(), " characters is cut short");
    std::string out;
    out.reserve(text.size() * 3 / 4);
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < text.size(); ++i) {
        int v = value(text[i]);
        if (v < 0) fail("'", text[i], "' at position ", i, " is not a base64url character");
        acc = (acc << 6) | static_cast<uint32_t>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out += static_cast<char>((acc >> bits) & 0xFF);
        }
    }
    return out;
}

}  // namespace strata
