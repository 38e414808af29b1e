// The arithmetic of one RMSNorm group held as float4s (rms_norm.cu's vector kernel) and of one RoPE pair (rope.cu),
// shared by those kernels and the fused QSA head kernel (qsa_heads.cu) so that all of them give the same bits.
#pragma once
#include <cstdint>

namespace strata::cuda {

// A thread's share of a group's Σx²: its float4s v[0 … NV) in order.
template <int NV>
__device__ __forceinline__ float sum_squares4(const float4 (&v)[NV]) {
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; ++i) ss += v[i].x * v[i].x + v[i].y * v[i].y + v[i].z * v[i].z + v[i].w * v[i].w;
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

// NeoX RoPE of pair (a = x[j], b = x[j + n_rot / 2]) at position p: x[j] = *lo, x[j + n_rot / 2] = *hi.
__device__ __forceinline__ void rope_pair(float a, float b, int j, int n_rot, float theta, int32_t p, float* lo,
                                          float* hi) {
    const float inv_freq = (float)(1.0 / pow((double)theta, (double)(2 * j) / n_rot));
    const float angle = (float)p * inv_freq;
    const float c = cosf(angle), s = sinf(angle);
    *lo = a * c - b * s;
    *hi = b * c + a * s;
}

}  // namespace strata::cuda
