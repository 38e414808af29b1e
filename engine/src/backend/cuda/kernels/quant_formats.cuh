// Weight block formats on the GPU: for each format, a decoder that turns one 32-weight chunk of a block into floats
// with the arithmetic of quant/dequant.cpp (layouts as in quant/quant_internal.h). __host__ __device__, so a host
// program can check them against dequantize_row bit for bit (tests/gpu/decode_host_test.cu).
#pragma once
#include <cstdint>
#include <cstring>

#include <cuda_fp16.h>

#include "gguf/ggml_types.h"
#include "quant/iq_tables.h"

namespace strata::cuda {

#define SD __host__ __device__ __forceinline__

// i-quant grids and sign tables: one copy per translation unit that includes this header, in global memory
// (lookups differ per lane, which constant memory would serialise); filled by upload_iq_tables().
static __device__ uint64_t d_iq2xxs_grid[256];
static __device__ uint64_t d_iq2xs_grid[512];
static __device__ uint64_t d_iq2s_grid[1024];
static __device__ uint32_t d_iq3xxs_grid[256];
static __device__ uint32_t d_iq3s_grid[512];
static __device__ uint8_t d_ksigns_iq2xs[128];
static __device__ int8_t d_kvalues_iq4nl[16];

#ifdef __CUDA_ARCH__
#define STRATA_IQ(name) d_##name
#else
#define STRATA_IQ(name) ::strata::iq::name
#endif

SD float half_to_float(uint16_t h) {
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half(h));
#else
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) bits = sign | 0x7f800000u | (man << 13);
    else if (exp != 0) bits = sign | ((exp + 112) << 23) | (man << 13);
    else if (man == 0) bits = sign;
    else {
        int e = -1;
        do { man <<= 1; ++e; } while (!(man & 0x400));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
#endif
}

SD float bf16_to_float(uint16_t h) {
#ifdef __CUDA_ARCH__
    return __uint_as_float((uint32_t)h << 16);
#else
    uint32_t bits = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
#endif
}

// a*b rounded, never fused into a following add (dequant.cpp compiles with fp-contract off).
SD float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

// Every block is 2-byte aligned (even block sizes); wider fields are read in 16-bit pieces.
SD uint16_t ld16(const uint8_t* p) { return *(const uint16_t*)p; }
SD uint32_t ld32(const uint8_t* p) { return (uint32_t)ld16(p) | ((uint32_t)ld16(p + 2) << 16); }

// Each format: QK weights in BYTES bytes per block; ABLK = the activation block (32: Q8_0, 256: Q8_K);
// deq32(block, sub, y) writes weights 32·sub … 32·sub + 31 of the block.
struct FmtQ8_0 {
    static constexpr int QK = 32, BYTES = 34, ABLK = 32;
    SD static void deq32(const uint8_t* b, int, float* y) {
        const float d = half_to_float(ld16(b));
        const int8_t* q = (const int8_t*)(b + 2);
#pragma unroll
        for (int j = 0; j < 32; ++j) y[j] = mul_rn((float)q[j], d);
    }
};

struct FmtQ4_0 {
    static constexpr int QK = 32, BYTES = 18, ABLK = 32;
    SD static void deq32(const uint8_t* b, int, float* y) {
        const float d = half_to_float(ld16(b));
        const uint8_t* q = b + 2;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            y[j] = mul_rn(d, (float)((q[j] & 0xF) - 8));
            y[j + 16] = mul_rn(d, (float)((q[j] >> 4) - 8));
        }
    }
};

struct FmtQ5_0 {
    static constexpr int QK = 32, BYTES = 22, ABLK = 32;
    SD static void deq32(const uint8_t* b, int, float* y) {
        const float d = half_to_float(ld16(b));
        const uint32_t qh = ld32(b + 2);
        const uint8_t* q = b + 6;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const int lo = (q[j] & 0xF) | (((qh >> j) & 1) << 4);
            const int hi = (q[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            y[j] = mul_rn(d, (float)(lo - 16));
            y[j + 16] = mul_rn(d, (float)(hi - 16));
        }
    }
};

struct FmtQ4_1 {   // weight d·q + m
    static constexpr int QK = 32, BYTES = 20, ABLK = 32;
    SD static void deq32(const uint8_t* b, int, float* y) {
        const float d = half_to_float(ld16(b)), m = half_to_float(ld16(b + 2));
        const uint8_t* q = b + 4;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            y[j] = mul_rn(d, (float)(q[j] & 0xF)) + m;
            y[j + 16] = mul_rn(d, (float)(q[j] >> 4)) + m;
        }
    }
};

struct FmtQ5_1 {
    static constexpr int QK = 32, BYTES = 24, ABLK = 32;
    SD static void deq32(const uint8_t* b, int, float* y) {
        const float d = half_to_float(ld16(b)), m = half_to_float(ld16(b + 2));
        const uint32_t qh = ld32(b + 4);
        const uint8_t* q = b + 8;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const int lo = (q[j] & 0xF) | (((qh >> j) & 1) << 4);
            const int hi = (q[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            y[j] = mul_rn(d, (float)lo) + m;
            y[j + 16] = mul_rn(d, (float)hi) + m;
        }
    }
};

struct FmtIQ4_NL {
    static constexpr int QK = 32, BYTES = 18, ABLK = 32;
    SD static void deq32(const uint8_t* b, int, float* y) {
        const float d = half_to_float(ld16(b));
        const uint8_t* q = b + 2;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            y[j] = mul_rn(d, (float)STRATA_IQ(kvalues_iq4nl)[q[j] & 0xF]);
            y[j + 16] = mul_rn(d, (float)STRATA_IQ(kvalues_iq4nl)[q[j] >> 4]);
        }
    }
};

struct FmtQ2_0 {   // 64 weights: code (qs[j/4] >> 2·(j%4)) & 3, value (code − 1)·d
    static constexpr int QK = 64, BYTES = 18, ABLK = 32;
    SD static void deq32(const uint8_t* b, int sub, float* y) {
        const float d = half_to_float(ld16(b));
        const uint8_t* q = b + 2 + 8 * sub;
#pragma unroll
        for (int j = 0; j < 32; ++j) y[j] = mul_rn((float)(((q[j / 4] >> (2 * (j % 4))) & 3) - 1), d);
    }
};

// Q4_K / Q5_K: 6-bit scale and min of sub-block j from the 12 packed bytes.
SD void k4_scale_min(int j, const uint8_t* q, int& sc, int& m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

struct FmtQ2_K {   // scales[16], qs[64], d, dmin
    static constexpr int QK = 256, BYTES = 84, ABLK = 256;
    SD static void deq32(const uint8_t* b, int sub, float* y) {
        const float d = half_to_float(ld16(b + 80)), dmin = half_to_float(ld16(b + 82));
        const uint8_t* qs = b + 16 + (sub / 4) * 32;
        const int k = sub % 4;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const uint8_t sc = b[2 * sub + half];
            const float dl = mul_rn(d, (float)(sc & 0xF)), ml = mul_rn(dmin, (float)(sc >> 4));
#pragma unroll
            for (int l = 0; l < 16; ++l) y[16 * half + l] = mul_rn(dl, (float)((qs[16 * half + l] >> (2 * k)) & 3)) - ml;
        }
    }
};

struct FmtQ3_K {   // hmask[32], qs[64], scales[12], d
    static constexpr int QK = 256, BYTES = 110, ABLK = 256;
    SD static int scale(const uint8_t* s, int i) {
        const int lo = i < 8 ? (s[i] & 0xF) : (s[i - 8] >> 4);
        const int hi = (s[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
        return (int)(int8_t)((lo | (hi << 4)) - 32);
    }
    SD static void deq32(const uint8_t* b, int sub, float* y) {
        const float d = half_to_float(ld16(b + 108));
        const uint8_t* hmask = b;
        const uint8_t* qs = b + 32 + (sub / 4) * 32;
        const int k = sub % 4;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const float dl = mul_rn(d, (float)scale(b + 96, 2 * sub + half));
#pragma unroll
            for (int l16 = 0; l16 < 16; ++l16) {
                const int l = 16 * half + l16;
                const int q = (qs[l] >> (2 * k)) & 3;
                const int hbit = (hmask[l] >> sub) & 1;
                y[l] = mul_rn(dl, (float)(q - (hbit ? 0 : 4)));
            }
        }
    }
};

struct FmtQ4_K {   // d, dmin, scales[12], qs[128]
    static constexpr int QK = 256, BYTES = 144, ABLK = 256;
    SD static void deq32(const uint8_t* b, int j, float* y) {
        const float d = half_to_float(ld16(b)), dmin = half_to_float(ld16(b + 2));
        int sc, m;
        k4_scale_min(j, b + 4, sc, m);
        const float dl = mul_rn(d, (float)sc), ml = mul_rn(dmin, (float)m);
        const uint8_t* q = b + 16 + 32 * (j / 2);
#pragma unroll
        for (int l = 0; l < 32; ++l) y[l] = mul_rn(dl, (float)((q[l] >> (4 * (j % 2))) & 0xF)) - ml;
    }
};

struct FmtQ5_K {   // d, dmin, scales[12], qh[32], qs[128]
    static constexpr int QK = 256, BYTES = 176, ABLK = 256;
    SD static void deq32(const uint8_t* b, int j, float* y) {
        const float d = half_to_float(ld16(b)), dmin = half_to_float(ld16(b + 2));
        int sc, m;
        k4_scale_min(j, b + 4, sc, m);
        const float dl = mul_rn(d, (float)sc), ml = mul_rn(dmin, (float)m);
        const uint8_t* qh = b + 16;
        const uint8_t* q = b + 48 + 32 * (j / 2);
#pragma unroll
        for (int l = 0; l < 32; ++l) {
            const int v = ((q[l] >> (4 * (j % 2))) & 0xF) | (((qh[l] >> j) & 1) << 4);
            y[l] = mul_rn(dl, (float)v) - ml;
        }
    }
};

struct FmtQ6_K {   // ql[128], qh[64], scales[16] (int8), d
    static constexpr int QK = 256, BYTES = 210, ABLK = 256;
    SD static void deq32(const uint8_t* b, int sub, float* y) {
        const float d = half_to_float(ld16(b + 208));
        const int h = sub / 4, r = sub % 4;
        const uint8_t* ql = b + h * 64 + (r & 1) * 32;
        const uint8_t* qh = b + 128 + h * 32;
        const int8_t* scales = (const int8_t*)(b + 192);
#pragma unroll
        for (int l = 0; l < 32; ++l) {
            const int lo = (r < 2 ? ql[l] : ql[l] >> 4) & 0xF;
            const int hi = (qh[l] >> (2 * r)) & 3;
            const float dl = mul_rn(d, (float)scales[2 * sub + l / 16]);
            y[l] = mul_rn(dl, (float)((lo | (hi << 4)) - 32));
        }
    }
};

struct FmtIQ4_XS {   // d, scales_h (u16), scales_l[4], qs[128]
    static constexpr int QK = 256, BYTES = 136, ABLK = 256;
    SD static void deq32(const uint8_t* b, int ib, float* y) {
        const float d = half_to_float(ld16(b));
        const int lo = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF;
        const int hi = (ld16(b + 2) >> (2 * ib)) & 3;
        const float dl = mul_rn(d, (float)((lo | (hi << 4)) - 32));
        const uint8_t* q = b + 8 + 16 * ib;
#pragma unroll
        for (int l = 0; l < 16; ++l) {
            y[l] = mul_rn(dl, (float)STRATA_IQ(kvalues_iq4nl)[q[l] & 0xF]);
            y[l + 16] = mul_rn(dl, (float)STRATA_IQ(kvalues_iq4nl)[q[l] >> 4]);
        }
    }
};

// 8 weights db·grid byte·sign (put8 of dequant.cpp); 4 weights for the 4-byte grids.
SD void put8(float* y, float db, uint64_t grid, uint32_t signs) {
#pragma unroll
    for (int k = 0; k < 8; ++k) y[k] = mul_rn(mul_rn(db, (float)((grid >> (8 * k)) & 0xFF)), (signs >> k) & 1 ? -1.0f : 1.0f);
}
SD void put4(float* y, float db, uint32_t grid, uint32_t signs) {
#pragma unroll
    for (int k = 0; k < 4; ++k) y[k] = mul_rn(mul_rn(db, (float)((grid >> (8 * k)) & 0xFF)), (signs >> k) & 1 ? -1.0f : 1.0f);
}

struct FmtIQ2_XXS {   // d, qs[32] (u16)
    static constexpr int QK = 256, BYTES = 66, ABLK = 256;
    SD static void deq32(const uint8_t* b, int ib, float* y) {
        const float d = half_to_float(ld16(b));
        const uint32_t idx = ld32(b + 2 + 8 * ib), aux = ld32(b + 2 + 8 * ib + 4);
        const float db = mul_rn(mul_rn(d, 0.5f + (float)(aux >> 28)), 0.25f);
#pragma unroll
        for (int g = 0; g < 4; ++g)
            put8(y + 8 * g, db, STRATA_IQ(iq2xxs_grid)[(idx >> (8 * g)) & 0xFF], STRATA_IQ(ksigns_iq2xs)[(aux >> (7 * g)) & 127]);
    }
};

struct FmtIQ2_XS {   // d, qs[32] (u16: 9-bit grid index, 7-bit sign index), scales[8]
    static constexpr int QK = 256, BYTES = 74, ABLK = 256;
    SD static void deq32(const uint8_t* b, int sub, float* y) {
        const float d = half_to_float(ld16(b));
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int q = 4 * sub + k;
            const int s = (b[66 + q / 4] >> (4 * ((q / 2) % 2))) & 0xF;
            const float db = mul_rn(mul_rn(d, 0.5f + (float)s), 0.25f);
            const uint16_t v = ld16(b + 2 + 2 * q);
            put8(y + 8 * k, db, STRATA_IQ(iq2xs_grid)[v & 511], STRATA_IQ(ksigns_iq2xs)[v >> 9]);
        }
    }
};

struct FmtIQ2_S {   // d, qs[32], signs[32], qh[8], scales[8]
    static constexpr int QK = 256, BYTES = 82, ABLK = 256;
    SD static void deq32(const uint8_t* b, int sub, float* y) {
        const float d = half_to_float(ld16(b));
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int q = 4 * sub + k;
            const int s = (b[74 + q / 4] >> (4 * ((q / 2) % 2))) & 0xF;
            const float db = mul_rn(mul_rn(d, 0.5f + (float)s), 0.25f);
            const int idx = b[2 + q] | (((b[66 + q / 4] >> (2 * (q % 4))) & 3) << 8);
            put8(y + 8 * k, db, STRATA_IQ(iq2s_grid)[idx], b[34 + q]);
        }
    }
};

struct FmtIQ3_XXS {   // d, qs[64], scales_signs[32]
    static constexpr int QK = 256, BYTES = 98, ABLK = 256;
    SD static void deq32(const uint8_t* b, int ib, float* y) {
        const float d = half_to_float(ld16(b));
        const uint32_t aux = ld32(b + 66 + 4 * ib);
        const float db = mul_rn(mul_rn(d, 0.5f + (float)(aux >> 28)), 0.5f);
        const uint8_t* qs = b + 2 + 8 * ib;
#pragma unroll
        for (int g = 0; g < 4; ++g) {
            const uint32_t signs = STRATA_IQ(ksigns_iq2xs)[(aux >> (7 * g)) & 127];
            put4(y + 8 * g, db, STRATA_IQ(iq3xxs_grid)[qs[2 * g]], signs);
            put4(y + 8 * g + 4, db, STRATA_IQ(iq3xxs_grid)[qs[2 * g + 1]], signs >> 4);
        }
    }
};

struct FmtIQ3_S {   // d, qs[64], qh[8], signs[32], scales[4]
    static constexpr int QK = 256, BYTES = 110, ABLK = 256;
    SD static void deq32(const uint8_t* b, int sub, float* y) {
        const float d = half_to_float(ld16(b));
        const uint8_t* qs = b + 2;
        const uint8_t* qh = b + 66;
        const uint8_t* signs = b + 74;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int q = 4 * sub + k;
            const int s = (b[106 + q / 8] >> (4 * ((q / 4) % 2))) & 0xF;
            const float db = mul_rn(d, (float)(1 + 2 * s));
            const int i0 = 2 * q, i1 = 2 * q + 1;
            const int idx0 = qs[i0] | (((qh[i0 / 8] >> (i0 % 8)) & 1) << 8);
            const int idx1 = qs[i1] | (((qh[i1 / 8] >> (i1 % 8)) & 1) << 8);
            put4(y + 8 * k, db, STRATA_IQ(iq3s_grid)[idx0], signs[q]);
            put4(y + 8 * k + 4, db, STRATA_IQ(iq3s_grid)[idx1], signs[q] >> 4);
        }
    }
};

// Calls fn(FmtX{}) for block format t; false when t is not a block format decoded here. The one format switch of
// the CUDA kernels (matmul.cu, matmul_tiled.cu, hyper_read.cu); a caller that instantiates fewer formats filters
// with `if constexpr` inside fn.
template <class Fn>
bool with_block_format(GgmlType t, Fn&& fn) {
    switch (t) {
    case GgmlType::Q8_0: fn(FmtQ8_0{}); return true;
    case GgmlType::Q4_0: fn(FmtQ4_0{}); return true;
    case GgmlType::Q5_0: fn(FmtQ5_0{}); return true;
    case GgmlType::Q4_1: fn(FmtQ4_1{}); return true;
    case GgmlType::Q5_1: fn(FmtQ5_1{}); return true;
    case GgmlType::IQ4_NL: fn(FmtIQ4_NL{}); return true;
    case GgmlType::Q2_0: fn(FmtQ2_0{}); return true;
    case GgmlType::Q2_K: fn(FmtQ2_K{}); return true;
    case GgmlType::Q3_K: fn(FmtQ3_K{}); return true;
    case GgmlType::Q4_K: fn(FmtQ4_K{}); return true;
    case GgmlType::Q5_K: fn(FmtQ5_K{}); return true;
    case GgmlType::Q6_K: fn(FmtQ6_K{}); return true;
    case GgmlType::IQ4_XS: fn(FmtIQ4_XS{}); return true;
    case GgmlType::IQ2_XXS: fn(FmtIQ2_XXS{}); return true;
    case GgmlType::IQ2_XS: fn(FmtIQ2_XS{}); return true;
    case GgmlType::IQ2_S: fn(FmtIQ2_S{}); return true;
    case GgmlType::IQ3_XXS: fn(FmtIQ3_XXS{}); return true;
    case GgmlType::IQ3_S: fn(FmtIQ3_S{}); return true;
    default: return false;
    }
}

}  // namespace strata::cuda
