// Integer dot products of one 32-weight chunk of a block against NT int8 activation chunks (Q8_0 / Q8_K values),
// with the sub-block arithmetic of quant/dot_scalar.cpp: integer sums (dp4a) times the block scales, per chunk.
// QDot<F>::dot adds each token's term to acc[t]; formats without an integer version decode to floats (fallback).
#pragma once
#include <cstdint>

#include "backend/cuda/kernels/quant_formats.cuh"
#include "backend/cuda/kernels/quant_int_ops.cuh"

namespace strata::cuda {

// A chunk decoded for integer dots: 8 words of int8 weights; its term for one token (activations a, scale da) is
//   da·(d·(s0·Σ_{words 0-3} w·a + s1·Σ_{words 4-7} w·a)) − da·(dm·(m·Σ a))
// (s1 used only with kSplit, the min term only with kMin): the sub-block arithmetic of quant/dot_scalar.cpp.
// (with kSplit and kMin both, the mins are per half too: m0·Σ_{0-15} a + m1·Σ_{16-31} a, as Q2_K).
struct IChunk {
    int w[8];
    float d, dm;
    int s0, s1, m0, m1;
};

// Σ of activations words i0 … i0 + 3.
SD int act_sum4(const int* a, int i0) {
    int s = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) s = dp4a(a[i0 + i], 0x01010101, s);
    return s;
}

// Q: the format's QInt (kSplit, kMin, kOffset). kOffset: decode() leaves the weights as codes w + kOffset (Q2_0's
// 2-bit codes without the −1, two instructions a word fewer) and the term subtracts kOffset·Σa: the same integer.
template <class Q>
SD float chunk_term(const IChunk& c, const int* a, float da) {
    constexpr bool kSplit = Q::kSplit, kMin = Q::kMin;
    int sq = kSplit ? c.s0 * dot_words(c.w, a, 0, 4) + c.s1 * dot_words(c.w, a, 4, 4) : c.s0 * dot_words(c.w, a, 0, 8);
    if constexpr (Q::kOffset != 0) {
        static_assert(!kSplit, "an offset applies to one scale s0 = 1 a chunk");
        sq -= Q::kOffset * act_sum(a);
    }
    float r = da * (c.d * (float)sq);
    if (kMin) {
        const int sm = kSplit ? c.m0 * act_sum4(a, 0) + c.m1 * act_sum4(a, 4) : c.m0 * act_sum(a);
        r -= da * (c.dm * (float)sm);
    }
    return r;
}

// The same term with Σa given (act_sum of the chunk's activations, computed once where they are staged): the same
// integer, so the same bits; for formats with an offset (Q2_0).
template <class Q>
SD float chunk_term_sum(const IChunk& c, const int* a, float da, int asum) {
    static_assert(!Q::kSplit && !Q::kMin && Q::kOffset != 0, "the offset formats' term");
    const int sq = c.s0 * dot_words(c.w, a, 0, 8) - Q::kOffset * asum;
    return da * (c.d * (float)sq);
}

struct NoGrid {
    static constexpr int kGridBytes = 0;
    SD static const void* global_grid() { return nullptr; }
};

// QInt<F>: formats with an integer decoder: kSplit, kMin, decode(block, sub, grid, chunk). kGridBytes / global_grid():
// the i-quants' grid table, which the kernels copy to shared memory (lanes look up different entries; a gather from
// global memory touches many cache lines); decode() reads it from `grid`.
template <class F>
struct QInt {
    static constexpr bool kHas = false;
};

// kActPerm: decode_perm() gives the chunk's weights in a permuted order (permute_act16 below, every 16 weights) that
// costs fewer instructions than decode(); kernels that stage the activations in shared memory may store them in that
// order once (and the chunks' Σa, act_sum) and use decode_perm with chunk_term_sum.
struct QIntBase : NoGrid {
    static constexpr bool kHas = true, kSplit = false, kMin = false, kActPerm = false;
    static constexpr int kOffset = 0;
};

// The 4 × 4 byte transpose of words w[0 … 3] (word i byte j → word j byte i): Q2_0's decode order.
SD void transpose4x4(uint32_t (&w)[4]) {
    const uint32_t t0 = prmt(w[0], w[1], 0x5140), t1 = prmt(w[0], w[1], 0x7362);
    const uint32_t t2 = prmt(w[2], w[3], 0x5140), t3 = prmt(w[2], w[3], 0x7362);
    w[0] = prmt(t0, t2, 0x5410);
    w[1] = prmt(t0, t2, 0x7632);
    w[2] = prmt(t1, t3, 0x5410);
    w[3] = prmt(t1, t3, 0x7632);
}

// 16 activations (4 words) in decode_perm's order for kActPerm formats: word s byte j = activation 4j + s.
SD void permute_act16(uint32_t (&w)[4]) { transpose4x4(w); }

template <>
struct QInt<FmtQ8_0> : QIntBase {
    SD static void decode(const uint8_t* b, int, const void*, IChunk& c) {
        uint32_t q[8];
        load_words<8>(b + 2, q);
#pragma unroll
        for (int i = 0; i < 8; ++i) c.w[i] = (int)q[i];
        c.d = half_to_float(ld16(b));
        c.s0 = 1;
    }
};

template <>
struct QInt<FmtQ4_0> : QIntBase {
    SD static void decode(const uint8_t* b, int, const void*, IChunk& c) {
        uint32_t q[4];
        load_words<4>(b + 2, q);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            c.w[i] = sub_bytes(q[i] & 0x0F0F0F0Fu, 0x08080808u);
            c.w[i + 4] = sub_bytes((q[i] >> 4) & 0x0F0F0F0Fu, 0x08080808u);
        }
        c.d = half_to_float(ld16(b));
        c.s0 = 1;
    }
};

template <>
struct QInt<FmtIQ4_NL> : QIntBase {
    SD static void decode(const uint8_t* b, int, const void*, IChunk& c) {
        const uint32_t table[4] = {0xBFAD9881u, 0xF6EADDCFu, 0x26190D01u, 0x71594535u};   // kIq4nlWords
        uint32_t q[4];
        load_words<4>(b + 2, q);
#pragma unroll
        for (int i = 0; i < 4; ++i) lookup16(q[i], table, c.w[i], c.w[i + 4]);
        c.d = half_to_float(ld16(b));
        c.s0 = 1;
    }
};

// Q5_0 / Q5_1: the 5th bits of weights 4i … 4i+3 (bits 4i … 4i+3 of qh) as bit 4 of each byte.
SD uint32_t fifth_bits(uint32_t qh, int first) { return (((qh >> first) & 0xF) * 0x00204081u & 0x01010101u) << 4; }

template <>
struct QInt<FmtQ5_0> : QIntBase {
    SD static void decode(const uint8_t* b, int, const void*, IChunk& c) {
        const uint32_t qh = ld32(b + 2);
        uint32_t q[4];
        load_words<4>(b + 6, q);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            c.w[i] = sub_bytes((q[i] & 0x0F0F0F0Fu) | fifth_bits(qh, 4 * i), 0x10101010u);
            c.w[i + 4] = sub_bytes(((q[i] >> 4) & 0x0F0F0F0Fu) | fifth_bits(qh, 16 + 4 * i), 0x10101010u);
        }
        c.d = half_to_float(ld16(b));
        c.s0 = 1;
    }
};

// Q4_1 / Q5_1 (weight d·q + m): the min term with dm = −m adds da·m·Σa (dot_q4_1 / dot_q5_1).
template <>
struct QInt<FmtQ4_1> : QIntBase {
    static constexpr bool kMin = true;
    SD static void decode(const uint8_t* b, int, const void*, IChunk& c) {
        uint32_t q[4];
        load_words<4>(b + 4, q);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            c.w[i] = (int)(q[i] & 0x0F0F0F0Fu);
            c.w[i + 4] = (int)((q[i] >> 4) & 0x0F0F0F0Fu);
        }
        c.d = half_to_float(ld16(b));
        c.dm = -half_to_float(ld16(b + 2));
        c.s0 = 1;
        c.m0 = 1;
    }
};

template <>
struct QInt<FmtQ5_1> : QIntBase {
    static constexpr bool kMin = true;
    SD static void decode(const uint8_t* b, int, const void*, IChunk& c) {
        const uint32_t qh = ld32(b + 4);
        uint32_t q[4];
        load_words<4>(b + 8, q);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            c.w[i] = (int)((q[i] & 0x0F0F0F0Fu) | fifth_bits(qh, 4 * i));
            c.w[i + 4] = (int)(((q[i] >> 4) & 0x0F0F0F0Fu) | fifth_bits(qh, 16 + 4 * i));
        }
        c.d = half_to_float(ld16(b));
        c.dm = -half_to_float(ld16(b + 2));
        c.s0 = 1;
        c.m0 = 1;
    }
};

// Q2_0: byte j of the chunk holds weights 4j … 4j+3 (2 bits each, value code − 1). The four shifted masks give the
// codes of weights {4j + s}; a 4×4 byte transpose puts them back in order. The codes stay 0 … 3 (kOffset 1).
// decode_perm: the four masks' words as they are (word s of each 16 holds weights {4j + s}), for activations in
// permute_act16's order: 8 byte permutes a chunk fewer.
template <>
struct QInt<FmtQ2_0> : QIntBase {
    static constexpr int kOffset = 1;
    static constexpr bool kActPerm = true;
    SD static void decode_perm(const uint8_t* b, int sub, const void*, IChunk& c) {
        uint32_t qw[2];
        load_words<2>(b + 2 + 8 * sub, qw);
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int s = 0; s < 4; ++s) c.w[4 * h + s] = (int)((qw[h] >> (2 * s)) & 0x03030303u);
        c.d = half_to_float(ld16(b));
        c.s0 = 1;
    }
    SD static void decode(const uint8_t* b, int sub, const void* grid, IChunk& c) {
        decode_perm(b, sub, grid, c);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            uint32_t v[4] = {(uint32_t)c.w[4 * h], (uint32_t)c.w[4 * h + 1], (uint32_t)c.w[4 * h + 2],
                             (uint32_t)c.w[4 * h + 3]};
            transpose4x4(v);
#pragma unroll
            for (int s = 0; s < 4; ++s) c.w[4 * h + s] = (int)v[s];
        }
    }
};

// Q4_K / Q5_K: sub-block scale sc and min m (dot_q4_k / dot_q5_k).
template <>
struct QInt<FmtQ4_K> : QIntBase {
    static constexpr bool kMin = true;
    SD static void decode(const uint8_t* b, int j, const void*, IChunk& c) {
        k4_scale_min(j, b + 4, c.s0, c.m0);
        uint32_t q[8];
        load32(b + 16 + 32 * (j / 2), q);
#pragma unroll
        for (int i = 0; i < 8; ++i) c.w[i] = (int)((q[i] >> (4 * (j % 2))) & 0x0F0F0F0Fu);
        c.d = half_to_float(ld16(b));
        c.dm = half_to_float(ld16(b + 2));
    }
};

template <>
struct QInt<FmtQ5_K> : QIntBase {
    static constexpr bool kMin = true;
    SD static void decode(const uint8_t* b, int j, const void*, IChunk& c) {
        k4_scale_min(j, b + 4, c.s0, c.m0);
        uint32_t qh[8], q[8];
        load32(b + 16, qh);
        load32(b + 48 + 32 * (j / 2), q);
#pragma unroll
        for (int i = 0; i < 8; ++i) c.w[i] = (int)(((q[i] >> (4 * (j % 2))) & 0x0F0F0F0Fu) | (((qh[i] >> j) & 0x01010101u) << 4));
        c.d = half_to_float(ld16(b));
        c.dm = half_to_float(ld16(b + 2));
    }
};

// Q6_K: two 16-weight halves with their own int8 scale (dot_q6_k).
template <>
struct QInt<FmtQ6_K> : QIntBase {
    static constexpr bool kSplit = true;
    SD static void decode(const uint8_t* b, int sub, const void*, IChunk& c) {
        const int h = sub / 4, r = sub % 4;
        uint32_t ql[8], qh[8];
        load_words<8>(b + h * 64 + (r & 1) * 32, ql);
        load_words<8>(b + 128 + h * 32, qh);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const uint32_t lo = (ql[i] >> (r < 2 ? 0 : 4)) & 0x0F0F0F0Fu;
            const uint32_t hi = ((qh[i] >> (2 * r)) & 0x03030303u) << 4;
            c.w[i] = sub_bytes(lo | hi, 0x20202020u);
        }
        const uint16_t sc = ld16(b + 192 + 2 * sub);
        c.s0 = (int8_t)(sc & 0xFF);
        c.s1 = (int8_t)(sc >> 8);
        c.d = half_to_float(ld16(b + 208));
    }
};

// The i-quants: d·(2·scale + 1)·Σ ±grid·a, times 0.125 (IQ2) or 0.25 (IQ3_XXS), which is exact, folded into d.
template <>
struct QInt<FmtIQ2_XXS> : QIntBase {
    static constexpr int kGridBytes = sizeof(iq::iq2xxs_grid);
    SD static const void* global_grid() { return STRATA_IQ(iq2xxs_grid); }
    SD static void decode(const uint8_t* b, int ib, const void* grid, IChunk& c) {
        const uint64_t* table = (const uint64_t*)grid;
        uint32_t ia[2];
        load_words<2>(b + 2 + 8 * ib, ia);
        const uint32_t idx = ia[0], aux = ia[1];
#pragma unroll
        for (int g = 0; g < 4; ++g) {
            const uint64_t gv = table[(idx >> (8 * g)) & 0xFF];
            uint32_t lo, hi;
            sign_masks((aux >> (7 * g)) & 127, lo, hi);
            c.w[2 * g] = apply_signs((uint32_t)gv, lo);
            c.w[2 * g + 1] = apply_signs((uint32_t)(gv >> 32), hi);
        }
        c.s0 = (int)(2 * (aux >> 28) + 1);
        c.d = 0.125f * half_to_float(ld16(b));
    }
};

template <>
struct QInt<FmtIQ2_XS> : QIntBase {
    static constexpr bool kSplit = true;
    static constexpr int kGridBytes = sizeof(iq::iq2xs_grid);
    SD static const void* global_grid() { return STRATA_IQ(iq2xs_grid); }
    SD static void decode(const uint8_t* b, int sub, const void* grid, IChunk& c) {
        const uint64_t* table = (const uint64_t*)grid;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const uint32_t v = ld16(b + 2 + 2 * (4 * sub + k));
            const uint64_t gv = table[v & 511];
            uint32_t lo, hi;
            sign_masks(v >> 9, lo, hi);
            c.w[2 * k] = apply_signs((uint32_t)gv, lo);
            c.w[2 * k + 1] = apply_signs((uint32_t)(gv >> 32), hi);
        }
        const int sc = b[66 + sub];
        c.s0 = 2 * (sc & 0xF) + 1;
        c.s1 = 2 * (sc >> 4) + 1;
        c.d = 0.125f * half_to_float(ld16(b));
    }
};

template <>
struct QInt<FmtIQ3_XXS> : QIntBase {
    static constexpr int kGridBytes = sizeof(iq::iq3xxs_grid);
    SD static const void* global_grid() { return STRATA_IQ(iq3xxs_grid); }
    SD static void decode(const uint8_t* b, int ib, const void* grid, IChunk& c) {
        const uint32_t* table = (const uint32_t*)grid;
        const uint32_t aux = ld32(b + 66 + 4 * ib);
        uint32_t qs[2];   // 8 grid indices
        load_words<2>(b + 2 + 8 * ib, qs);
#pragma unroll
        for (int g = 0; g < 4; ++g) {
            uint32_t lo, hi;
            sign_masks((aux >> (7 * g)) & 127, lo, hi);
            c.w[2 * g] = apply_signs(table[(qs[g / 2] >> (16 * (g % 2))) & 0xFF], lo);
            c.w[2 * g + 1] = apply_signs(table[(qs[g / 2] >> (16 * (g % 2) + 8)) & 0xFF], hi);
        }
        c.s0 = (int)(2 * (aux >> 28) + 1);
        c.d = 0.25f * half_to_float(ld16(b));
    }
};

// Q2_K: 2-bit quants of element e in qs[(e/128)·32 + e%32] at bit 2·((e/32)%4); per 16: scale and min (dot_q2_k).
template <>
struct QInt<FmtQ2_K> : QIntBase {
    static constexpr bool kSplit = true, kMin = true;
    SD static void decode(const uint8_t* b, int sub, const void*, IChunk& c) {
        uint32_t q[8];
        load_words<8>(b + 16 + (sub / 4) * 32, q);
#pragma unroll
        for (int i = 0; i < 8; ++i) c.w[i] = (int)((q[i] >> (2 * (sub % 4))) & 0x03030303u);
        const uint16_t sc = ld16(b + 2 * sub);
        c.s0 = sc & 0xF;
        c.m0 = (sc >> 4) & 0xF;
        c.s1 = (sc >> 8) & 0xF;
        c.m1 = sc >> 12;
        c.d = half_to_float(ld16(b + 80));
        c.dm = half_to_float(ld16(b + 82));
    }
};

// Q3_K: q − 4 without the high bit (hmask[e%32] bit e/32); per 16: a 6-bit signed scale (dot_q3_k).
template <>
struct QInt<FmtQ3_K> : QIntBase {
    static constexpr bool kSplit = true;
    SD static void decode(const uint8_t* b, int sub, const void*, IChunk& c) {
        uint32_t q[8], hm[8];
        load_words<8>(b + 32 + (sub / 4) * 32, q);
        load_words<8>(b, hm);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const uint32_t lo = (q[i] >> (2 * (sub % 4))) & 0x03030303u;
            const uint32_t hb = ((hm[i] >> sub) & 0x01010101u) << 2;
            c.w[i] = sub_bytes(lo | hb, 0x04040404u);
        }
        c.s0 = FmtQ3_K::scale(b + 96, 2 * sub);
        c.s1 = FmtQ3_K::scale(b + 96, 2 * sub + 1);
        c.d = half_to_float(ld16(b + 108));
    }
};

// IQ4_XS: IQ4_NL values, a 6-bit scale − 32 per 32 (dot_iq4_xs).
template <>
struct QInt<FmtIQ4_XS> : QIntBase {
    SD static void decode(const uint8_t* b, int ib, const void*, IChunk& c) {
        const uint32_t table[4] = {0xBFAD9881u, 0xF6EADDCFu, 0x26190D01u, 0x71594535u};   // kIq4nlWords
        uint32_t q[4];
        load_words<4>(b + 8 + 16 * ib, q);
#pragma unroll
        for (int i = 0; i < 4; ++i) lookup16(q[i], table, c.w[i], c.w[i + 4]);
        const int lo = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF;
        const int hi = (ld16(b + 2) >> (2 * ib)) & 3;
        c.s0 = (lo | (hi << 4)) - 32;
        c.d = half_to_float(ld16(b));
    }
};

// IQ2_S: 10-bit grid index (qs + 2 bits of qh), explicit sign bytes, a 4-bit scale per 16 (dot_iq2_s).
template <>
struct QInt<FmtIQ2_S> : QIntBase {
    static constexpr bool kSplit = true;
    static constexpr int kGridBytes = sizeof(iq::iq2s_grid);
    SD static const void* global_grid() { return STRATA_IQ(iq2s_grid); }
    SD static void decode(const uint8_t* b, int sub, const void* grid, IChunk& c) {
        const uint64_t* table = (const uint64_t*)grid;
        uint32_t qs[1], sg[1];
        load_words<1>(b + 2 + 4 * sub, qs);
        load_words<1>(b + 34 + 4 * sub, sg);
        const uint32_t qh = b[66 + sub];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const uint32_t idx = ((qs[0] >> (8 * k)) & 0xFF) | (((qh >> (2 * k)) & 3) << 8);
            const uint64_t gv = table[idx];
            const uint32_t signs = (sg[0] >> (8 * k)) & 0xFF;
            c.w[2 * k] = apply_signs((uint32_t)gv, spread4(signs & 0xF));
            c.w[2 * k + 1] = apply_signs((uint32_t)(gv >> 32), spread4(signs >> 4));
        }
        const int sc = b[74 + sub];
        c.s0 = 2 * (sc & 0xF) + 1;
        c.s1 = 2 * (sc >> 4) + 1;
        c.d = 0.125f * half_to_float(ld16(b));
    }
};

// IQ3_S: 9-bit grid index (qs + 1 bit of qh), explicit sign bytes, scale 2·s + 1 per 32 (dot_iq3_s).
template <>
struct QInt<FmtIQ3_S> : QIntBase {
    static constexpr int kGridBytes = sizeof(iq::iq3s_grid);
    SD static const void* global_grid() { return STRATA_IQ(iq3s_grid); }
    SD static void decode(const uint8_t* b, int sub, const void* grid, IChunk& c) {
        const uint32_t* table = (const uint32_t*)grid;
        uint32_t qs[2], sg[1];
        load_words<2>(b + 2 + 8 * sub, qs);
        load_words<1>(b + 74 + 4 * sub, sg);
        const uint32_t qh = b[66 + sub];
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const uint32_t idx = ((qs[k / 4] >> (8 * (k % 4))) & 0xFF) | (((qh >> k) & 1) << 8);
            const uint32_t signs = (sg[0] >> (8 * (k / 2) + 4 * (k % 2))) & 0xF;
            c.w[k] = apply_signs(table[idx], spread4(signs));
        }
        const int sc = (b[106 + sub / 2] >> (4 * (sub % 2))) & 0xF;
        c.s0 = 2 * sc + 1;
        c.d = half_to_float(ld16(b));
    }
};

// QDot<F>::dot(block, sub, grid, act, cnt, acc): acc[t] += the chunk's dot with token t for t < cnt, where
// act(t, a) loads token t's 32 int8 activations into a[0..7] (words) and returns their block scale (one token's
// activations in registers at a time). Integer formats decode once (QInt); the others decode to floats and
// multiply in float (the arithmetic of the earlier kernel).
template <class F, bool kInt = QInt<F>::kHas>
struct QDot : NoGrid {
    template <int NT, class Act>
    SD static void dot(const uint8_t* b, int sub, const void*, const Act& act, int cnt, float (&acc)[NT]) {
        float w[32];
        F::deq32(b, sub, w);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            if (t >= cnt) break;
            int a[8];
            const float da = act(t, a);
            float s = 0.0f;
#pragma unroll
            for (int e = 0; e < 32; ++e) s = fmaf(w[e], (float)(int8_t)(a[e / 4] >> (8 * (e % 4))), s);
            acc[t] = fmaf(s, da, acc[t]);
        }
    }
};

template <class F>
struct QDot<F, true> : QInt<F> {
    template <int NT, class Act>
    SD static void dot(const uint8_t* b, int sub, const void* grid, const Act& act, int cnt, float (&acc)[NT]) {
        IChunk c;
        QInt<F>::decode(b, sub, grid, c);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            if (t >= cnt) break;
            int a[8];
            const float da = act(t, a);
            acc[t] += chunk_term<QInt<F>>(c, a, da);
        }
    }
};

#ifdef __CUDACC__
// The format's grid table (i-quants) in shared memory; every thread of the block must call this.
template <class F>
__device__ __forceinline__ const void* stage_grid(uint4* smem) {
    constexpr int kWords = QDot<F>::kGridBytes / 4;   // the tables are 4-byte aligned
    if (kWords == 0) return nullptr;
    const uint32_t* src = (const uint32_t*)QDot<F>::global_grid();
    for (int i = threadIdx.x; i < kWords; i += blockDim.x) ((uint32_t*)smem)[i] = src[i];
    __syncthreads();
    return smem;
}

template <class F>
struct GridSmem {   // uint4 words of shared memory for the table (1 when there is none)
    static constexpr int kWords = QDot<F>::kGridBytes ? QDot<F>::kGridBytes / 16 : 1;
};
#endif  // __CUDACC__

}  // namespace strata::cuda
