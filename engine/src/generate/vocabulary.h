// The bytes each token stands for, read from the GGUF's tokenizer.ggml.tokens / token_type (GGUF.md §3), for the
// grammar constraint: byte-level BPE tokens are decoded through GPT-2's byte-to-character table, user-defined tokens
// (<think>, <tool_call>, …) are their own text, control and unused tokens stand for no text.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

class GgufFile;

struct Vocabulary {
    std::vector<std::string> bytes;   // per token id
    std::vector<uint8_t> is_text;     // 1: the token stands for bytes[id]; 0: a control/unused token

    std::vector<int16_t> first_byte;                      // per token id: its first byte, −1 for no text
    std::array<std::vector<int32_t>, 256> by_first_byte;   // text tokens by their first byte, ids ascending

    size_t size() const { return bytes.size(); }
    bool empty() const { return bytes.empty(); }
    // Fills first_byte and by_first_byte from bytes / is_text (read_vocabulary does it).
    void index();
};

// Empty when the file has no tokenizer.ggml.tokens.
Vocabulary read_vocabulary(const GgufFile& file);

// One byte-level BPE token text (GPT-2's table: bytes 0-32, 127-160 and 173 are written as U+0100 …) to its bytes;
// false when a character is outside the table.
bool decode_byte_level(const std::string& token, std::string& out);

}  // namespace strata
