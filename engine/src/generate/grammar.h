// Constrained output: a grammar (docs/grammar.md, a subset of llama.cpp's GBNF) compiled to byte-level rules, and a
// matcher that says which bytes may come next. The text is matched as UTF-8 bytes; character classes become
// alternatives of byte-range sequences, so a token may end inside a character.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

// 256 bits: the bytes one grammar position accepts.
struct ByteSet {
    std::array<uint64_t, 4> bits{};
    bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
    void add(uint8_t b) { bits[b >> 6] |= uint64_t(1) << (b & 63); }
    void add_range(uint8_t lo, uint8_t hi) {
        for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
    }
    void merge(const ByteSet& o) {
        for (int i = 0; i < 4; ++i) bits[i] |= o.bits[i];
    }
    bool operator==(const ByteSet& o) const { return bits == o.bits; }
};

// The compiled grammar: rules of alternatives, each alternative a run of elements in `elems` ending in an End.
class Grammar {
public:
    enum class Kind : uint8_t { end, bytes, rule };
    struct Elem {
        Kind kind;
        uint32_t value;   // bytes: index into byte_sets; rule: rule index
    };

    // Parses and compiles a grammar's text. Throws strata::Error "bad grammar: <reason> (line L, column C)".
    static std::shared_ptr<const Grammar> parse(std::string_view text);

    const std::vector<Elem>& elems() const { return elems_; }
    const std::vector<ByteSet>& byte_sets() const { return byte_sets_; }
    const std::vector<uint32_t>& alternatives(uint32_t rule) const { return rule_alts_[rule]; }
    uint32_t root() const { return root_; }
    size_t rule_count() const { return rule_alts_.size(); }

private:
    friend class GrammarBuilder;
    std::vector<Elem> elems_;
    std::vector<ByteSet> byte_sets_;
    std::vector<std::vector<uint32_t>> rule_alts_;   // per rule: where each alternative starts in elems_
    uint32_t root_ = 0;
};

// Where matching stands: the set of parse stacks that the text so far leaves alive. A stack is the positions (into
// Grammar::elems) still to match, innermost last; its last position is always a bytes element, and an empty stack
// means the text is a whole sentence.
class GrammarMatcher {
public:
    explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

    // Feeds bytes; returns false (and leaves the matcher unchanged) if they cannot continue the text.
    bool accept(std::string_view bytes);
    // Whether the bytes could be fed (the matcher is not changed).
    bool allows(std::string_view bytes) const;
    // The text so far is a whole sentence of the grammar.
    bool complete() const;
    // Some byte may still follow.
    bool can_continue() const;
    // The bytes any non-empty continuation may start with.
    const ByteSet& first_bytes() const { return first_; }

private:
    using Stack = std::vector<uint32_t>;
    using Stacks = std::vector<Stack>;
    // Expands `stack` until its top is a bytes element (or it is empty), adding the results to `out`.
    void expand(Stack& stack, Stacks& out, int depth) const;
    bool step(const Stacks& from, uint8_t byte, Stacks& to) const;
    // The stacks after the (non-empty) bytes, into out; false as soon as a byte cannot come.
    bool feed(std::string_view bytes, Stacks& out) const;
    void set_stacks(Stacks stacks);

    std::shared_ptr<const Grammar> g_;
    Stacks stacks_;
    ByteSet first_;
};

// Decodes base64url (RFC 4648 §5; '+' and '/' accepted too; padding optional). Throws strata::Error on bad input.
std::string decode_base64url(std::string_view text);

}  // namespace strata
