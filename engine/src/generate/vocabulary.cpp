#include "generate/vocabulary.h"

#include <array>

#include "gguf/gguf_file.h"

namespace strata {

namespace {

// GPT-2's bytes_to_unicode, inverted: code point (< 324) → byte, −1 where none.
std::array<int, 324> byte_level_table() {
    std::array<int, 324> to_byte;
    to_byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        to_byte[printable ? b : 256 + n++] = b;
    }
    return to_byte;
}

// SentencePiece-style byte tokens "<0xHH>" (token type 6).
bool byte_token(const std::string& s, std::string& out) {
    if (s.size() != 6 || s.compare(0, 3, "<0x") != 0 || s[5] != '>') return false;
    unsigned v = 0;
    for (int i = 3; i < 5; ++i) {
        char c = s[i];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
        if (d < 0) return false;
        v = v * 16 + d;
    }
    out.assign(1, static_cast<char>(v));
    return true;
}

}  // namespace

bool decode_byte_level(const std::string& token, std::string& out) {
    static const std::array<int, 324> to_byte = byte_level_table();
    out.clear();
    for (size_t i = 0; i < token.size();) {
        const unsigned char c = static_cast<unsigned char>(token[i]);
        uint32_t cp;
        int len;
        if (c < 0x80) { cp = c; len = 1; }
        else if ((c & 0xE0) == 0xC0 && i + 1 < token.size()) { cp = ((c & 0x1F) << 6) | (token[i + 1] & 0x3F); len = 2; }
        else return false;   // the table's characters are all below U+0800
        if (cp >= to_byte.size() || to_byte[cp] < 0) return false;
        out += static_cast<char>(to_byte[cp]);
        i += len;
    }
    return true;
}

void Vocabulary::index() {
    for (auto& ids : by_first_byte) ids.clear();
    first_byte.assign(bytes.size(), -1);
    for (size_t id = 0; id < bytes.size(); ++id)
        if (is_text[id] && !bytes[id].empty()) {
            first_byte[id] = static_cast<uint8_t>(bytes[id][0]);
            by_first_byte[first_byte[id]].push_back((int32_t)id);
        }
}

Vocabulary read_vocabulary(const GgufFile& file) {
    enum { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
    Vocabulary v;
    const GgufValue* tokens = file.find("tokenizer.ggml.tokens");
    if (!tokens) return v;
    const GgufValue* types = file.find("tokenizer.ggml.token_type");
    const size_t n = tokens->arr_s.size();
    v.bytes.resize(n);
    v.is_text.assign(n, 0);
    for (size_t id = 0; id < n; ++id) {
        int type = kNormal;
        if (types && id < types->arr_i.size()) type = static_cast<int>(types->arr_i[id]);
        else if (types && id < types->arr_u.size()) type = static_cast<int>(types->arr_u[id]);
        const std::string& s = tokens->arr_s[id];
        bool ok = false;
        if (type == kNormal) ok = decode_byte_level(s, v.bytes[id]);
        else if (type == kUserDefined) { v.bytes[id] = s; ok = true; }
        else if (type == kByte) ok = byte_token(s, v.bytes[id]);
        v.is_text[id] = ok && !v.bytes[id].empty();
        if (!v.is_text[id]) v.bytes[id].clear();
    }
    v.index();
    return v;
}

}  // namespace strata
