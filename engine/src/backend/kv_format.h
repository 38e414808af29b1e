// The element formats of the QSA key and value caches (Session's k_cache / v_cache; --kv). A cache holds one row of
// `width` = n_kv_heads · head_dim values per token position, each row starting on a float boundary:
//   f32  width floats;
//   f16  width fp16 values (width even), rounded to nearest even;
//   q8   width int8 values, then one fp16 scale d per group of kKvQ8Group values (the last group may be shorter):
//        value = q · d, with d = fp16(max|x| / 127) over the group and q = round-to-even(x / d) clamped to ±127.
//        width + 2·⌈width / 64⌉ bytes, padded to 4: 264 bytes for the published 256-value rows (f32: 1,024).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace strata {

enum class KvType : uint8_t { f32, f16, q8 };

constexpr int kKvQ8Group = 64;

inline size_t kv_q8_groups(size_t width) { return (width + kKvQ8Group - 1) / kKvQ8Group; }

// Bytes of one token's row, before padding to a float boundary.
inline size_t kv_row_bytes(KvType t, size_t width) {
    switch (t) {
    case KvType::f16: return 2 * width;
    case KvType::q8: return width + 2 * kv_q8_groups(width);
    default: return 4 * width;
    }
}

// Floats of one token's row (the row stride of a cache buffer of floats).
inline size_t kv_row_floats(KvType t, size_t width) { return (kv_row_bytes(t, width) + 3) / 4; }

inline const char* kv_type_name(KvType t) { return t == KvType::f16 ? "f16" : t == KvType::q8 ? "q8" : "f32"; }

// "f32", "f16" or "q8"; false for anything else.
inline bool parse_kv_type(const std::string& s, KvType& out) {
    if (s == "f32") out = KvType::f32;
    else if (s == "f16") out = KvType::f16;
    else if (s == "q8") out = KvType::q8;
    else return false;
    return true;
}

}  // namespace strata
