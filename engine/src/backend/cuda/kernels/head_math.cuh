// The arithmetic of one RMSNorm group held as float4s (rms_norm.cu's vector kernel) and of one RoPE pair (rope.cu),
// shared by those kernels, the pooled indexer keys (kv_write.cu) and the fused QSA head kernel (qsa_heads.cu) so that
// all of them give the same bits.
#pragma once
#include <cstdint>

namespace strata::cuda {

// The roundings are spelled out (_rn intrinsics) rather than left to the compiler's contraction into FMAs, which can
// differ between the kernels an expression is inlined into.

// A thread's share of a group's Σx²: its float4s v[0 … NV) in order.
template <int NV>
__device__ __forceinline__ float sum_squares4(const float4 (&v)[NV]) {
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
        const float4 x = v[i];
        ss = __fadd_rn(ss, __fmaf_rn(x.w, x.w, __fmaf_rn(x.z, x.z, __fmaf_rn(x.y, x.y, __fmul_rn(x.x, x.x)))));
    }
    return ss;
}

// v · s, then · w[c … c + 3] (indices mod w_len) when w is not null.
__device__ __forceinline__ float4 scale4(float4 v, float s, const float* w, int c, int w_len) {
    float4 o = make_float4(v.x * s, v.y * s, v.z * s, v.w * s);
    if (w) {
        o.x *= w[c % w_len];
        o.y *= w[(c + 1) % w_len];
        o.z *= w[(c + 2) % w_len];
        o.w *= w[(c + 3) % w_len];
    }
    return o;
}

// The cosine and sine of RoPE frequency j < n_rot / 2 at position p.
__device__ __forceinline__ void rope_cos_sin(int j, int n_rot, float theta, int32_t p, float* c, float* s) {
    const float inv_freq = (float)(1.0 / pow((double)theta, (double)(2 * j) / n_rot));
    const float angle = (float)p * inv_freq;
    *c = cosf(angle);
    *s = sinf(angle);
}
// NeoX halves: the pair (a = x[j], b = x[j + n_rot / 2]) rotated by (c, s) is (rope_lo, rope_hi).
__device__ __forceinline__ float rope_lo(float a, float b, float c, float s) {
    return __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
}
__device__ __forceinline__ float rope_hi(float a, float b, float c, float s) {
    return __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}

// Pair j of a head at position p: x[j] = *lo, x[j + n_rot / 2] = *hi.
__device__ __forceinline__ void rope_pair(float a, float b, int j, int n_rot, float theta, int32_t p, float* lo,
                                          float* hi) {
    float c, s;
    rope_cos_sin(j, n_rot, theta, p, &c, &s);
    *lo = rope_lo(a, b, c, s);
    *hi = rope_hi(a, b, c, s);
}

}  // namespace strata::cuda
