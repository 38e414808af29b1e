// Integer and byte helpers of the chunk decoders (quant_dots.cuh), __host__ __device__ so the host can check them:
// dp4a and byte_perm with host versions, i-quant sign masks, byte-wise subtraction, word loads from 2-byte aligned
// blocks, the 16-entry table lookup of IQ4_NL / IQ4_XS.
#pragma once
#include <cstdint>

#include "backend/cuda/kernels/quant_formats.cuh"

namespace strata::cuda {

// Sign masks of the i-quants, computed instead of looked up (a table gather costs more than these few operations):
// ksigns_iq2xs[s7] is s7 with an even-parity bit 7; each sign bit becomes a 0x00 / 0xFF byte, weights 0-3 in lo.
SD uint32_t spread4(uint32_t bits) { return ((bits * 0x00204081u) & 0x01010101u) * 0xFFu; }

SD void sign_masks(uint32_t s7, uint32_t& lo, uint32_t& hi) {
#ifdef __CUDA_ARCH__
    const uint32_t parity = __popc(s7) & 1;
#else
    const uint32_t parity = __builtin_popcount(s7) & 1;
#endif
    lo = spread4(s7 & 0xF);
    hi = spread4((s7 >> 4) | (parity << 3));
}

SD int dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int k = 0; k < 4; ++k) c += (int)(int8_t)(a >> (8 * k)) * (int)(int8_t)(b >> (8 * k));
    return c;
#endif
}

// __byte_perm with selector nibbles 0…7 only (callers mask bit 3, whose meaning differs between PTX modes).
SD uint32_t prmt(uint32_t x, uint32_t y, uint32_t s) {
#ifdef __CUDA_ARCH__
    return __byte_perm(x, y, s);
#else
    const uint64_t v = (uint64_t)x | ((uint64_t)y << 32);
    uint32_t r = 0;
    for (int k = 0; k < 4; ++k) r |= (uint32_t)((v >> (8 * ((s >> (4 * k)) & 7))) & 0xFF) << (8 * k);
    return r;
#endif
}

// Signed weights from grid bytes g (all ≥ 1) and a 0x00/0xFF sign mask per byte: −g where the mask is set.
SD int apply_signs(uint32_t g, uint32_t mask) { return (int)((g ^ mask) + (mask & 0x01010101u)); }

// Bytes with values v in 0…0x7F per byte: v − c per byte as int8 (no borrow between bytes).
SD int sub_bytes(uint32_t v, uint32_t c) { return (int)(((v | 0x80808080u) - c) ^ 0x80808080u); }

// Σ of the 32 activations of a chunk.
SD int act_sum(const int* a) {
    int s = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) s = dp4a(a[i], 0x01010101, s);
    return s;
}

// Σ w[i]·a[i] over words i0 … i0 + cnt − 1.
SD int dot_words(const int* w, const int* a, int i0, int cnt) {
    int s = 0;
#pragma unroll
    for (int i = 0; i < cnt; ++i) s = dp4a(w[i0 + i], a[i0 + i], s);
    return s;
}

// 4-bit table lookup (IQ4_NL / IQ4_XS values): the 8 nibbles of q4 → lo = values of the low nibbles of its 4 bytes,
// hi = values of the high nibbles, in byte order.
SD void lookup16(uint32_t q4, const uint32_t* table, int& lo, int& hi) {
    const uint32_t sel_hi = 0x32103210u | ((q4 & 0x88888888u) >> 1);
    const uint32_t idx = q4 & 0x77777777u;
    uint32_t tmp[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const uint32_t low = prmt(table[0], table[1], idx >> (16 * i));
        const uint32_t high = prmt(table[2], table[3], idx >> (16 * i));
        tmp[i] = prmt(low, high, sel_hi >> (16 * i));
    }
    lo = (int)prmt(tmp[0], tmp[1], 0x6420);
    hi = (int)prmt(tmp[0], tmp[1], 0x7531);
}

// kvalues_iq4nl as 4 little-endian words, written as literals in QDot<FmtIQ4_NL> (no load per chunk); checked here.
constexpr uint32_t kIq4nlWords[4] = {0xBFAD9881u, 0xF6EADDCFu, 0x26190D01u, 0x71594535u};
constexpr bool iq4nl_words_match() {
    for (int i = 0; i < 16; ++i)
        if ((uint8_t)(kIq4nlWords[i / 4] >> (8 * (i % 4))) != (uint8_t)iq::kvalues_iq4nl[i]) return false;
    return true;
}
static_assert(iq4nl_words_match(), "kIq4nlWords must equal iq::kvalues_iq4nl");

// N little-endian words from 2-byte aligned p (as ld32 at p, p + 4, …): N aligned 4-byte loads, a 2-byte load for
// the tail when p is not 4-byte aligned, and funnel shifts, instead of 2N 2-byte loads. Reads only within
// [p − 2, p + 4N), and p − 2 only when p is not 4-byte aligned (so p is not the start of a buffer).
template <int N>
SD void load_words(const uint8_t* p, uint32_t (&w)[N]) {
    const uint32_t off = (uint32_t)((uintptr_t)p & 2);
    const uint32_t* base = (const uint32_t*)(p - off);
    uint32_t u[N + 1];
#pragma unroll
    for (int i = 0; i < N; ++i) u[i] = base[i];
    u[N] = off ? (uint32_t)ld16((const uint8_t*)(base + N)) : 0u;
#pragma unroll
    for (int i = 0; i < N; ++i) {
#ifdef __CUDA_ARCH__
        w[i] = __funnelshift_r(u[i], u[i + 1], 8 * off);
#else
        w[i] = (uint32_t)((((uint64_t)u[i + 1] << 32) | u[i]) >> (8 * off));
#endif
    }
}

// 32 bytes at p (2-byte aligned) as 8 words: two 16-byte loads when p is 16-byte aligned. For Q4_K / Q5_K the
// blocks (144 / 176 bytes) are all aligned or all not in a matrix, so the branch is the same for every lane.
SD void load32(const uint8_t* p, uint32_t (&w)[8]) {
#ifdef __CUDA_ARCH__
    if (((uintptr_t)p & 15) == 0) {
        const uint4 lo = ((const uint4*)p)[0], hi = ((const uint4*)p)[1];
        w[0] = lo.x; w[1] = lo.y; w[2] = lo.z; w[3] = lo.w;
        w[4] = hi.x; w[5] = hi.y; w[6] = hi.z; w[7] = hi.w;
        return;
    }
#endif
    load_words<8>(p, w);
}

}  // namespace strata::cuda
