// AVX2 + FMA pieces of gemm.h (this file is compiled with -mavx2 -mfma; called only when the CPU has them).
#include <immintrin.h>

#include <cmath>

#include "gemm.h"

namespace strata::vision::detail {
namespace {

// exp for 8 floats (Cephes-style: 2^n * poly(r), |rel err| ~ 2 ulp; inputs clamped to +-88.376).
inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-88.3762626647949f)), _mm256_set1_ps(88.3762626647949f));
    __m256 fx = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f));
    fx = _mm256_floor_ps(fx);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500E-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507E-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073E-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894E-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459E-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201E-1f));
    const __m256 x2 = _mm256_mul_ps(x, x);
    y = _mm256_fmadd_ps(y, x2, _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i n = _mm256_cvttps_epi32(fx);
    n = _mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(n));
}

}  // namespace

void kernel_avx2_6x16(int64_t K, const float* A, int64_t lda, const float* bp, float* C, int64_t ldc, int m, int n) {
    const float* a[6];
    for (int i = 0; i < 6; ++i) a[i] = A + (i < m ? i : 0) * lda;
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int64_t k = 0; k < K; ++k) {
        const __m256 b0 = _mm256_loadu_ps(bp + k * 16), b1 = _mm256_loadu_ps(bp + k * 16 + 8);
        __m256 v = _mm256_broadcast_ss(a[0] + k);
        c00 = _mm256_fmadd_ps(v, b0, c00); c01 = _mm256_fmadd_ps(v, b1, c01);
        v = _mm256_broadcast_ss(a[1] + k);
        c10 = _mm256_fmadd_ps(v, b0, c10); c11 = _mm256_fmadd_ps(v, b1, c11);
        v = _mm256_broadcast_ss(a[2] + k);
        c20 = _mm256_fmadd_ps(v, b0, c20); c21 = _mm256_fmadd_ps(v, b1, c21);
        v = _mm256_broadcast_ss(a[3] + k);
        c30 = _mm256_fmadd_ps(v, b0, c30); c31 = _mm256_fmadd_ps(v, b1, c31);
        v = _mm256_broadcast_ss(a[4] + k);
        c40 = _mm256_fmadd_ps(v, b0, c40); c41 = _mm256_fmadd_ps(v, b1, c41);
        v = _mm256_broadcast_ss(a[5] + k);
        c50 = _mm256_fmadd_ps(v, b0, c50); c51 = _mm256_fmadd_ps(v, b1, c51);
    }
    alignas(32) float out[6][16];
    _mm256_store_ps(out[0], c00); _mm256_store_ps(out[0] + 8, c01);
    _mm256_store_ps(out[1], c10); _mm256_store_ps(out[1] + 8, c11);
    _mm256_store_ps(out[2], c20); _mm256_store_ps(out[2] + 8, c21);
    _mm256_store_ps(out[3], c30); _mm256_store_ps(out[3] + 8, c31);
    _mm256_store_ps(out[4], c40); _mm256_store_ps(out[4] + 8, c41);
    _mm256_store_ps(out[5], c50); _mm256_store_ps(out[5] + 8, c51);
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) C[i * ldc + j] = out[i][j];
}

double exp_scaled_avx2(float* x, int64_t n, float scale, float shift) {
    const __m256 vs = _mm256_set1_ps(scale), vsh = _mm256_set1_ps(shift);
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = exp8(_mm256_fmsub_ps(_mm256_loadu_ps(x + i), vs, vsh));
        _mm256_storeu_ps(x + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc);
    double s = 0;
    for (float v : lanes) s += v;
    for (; i < n; ++i) {
        x[i] = std::exp(x[i] * scale - shift);
        s += x[i];
    }
    return s;
}

void gelu_tanh_avx2(float* x, int64_t n) {
    const __m256 beta = _mm256_set1_ps(0.7978845608028654f), kappa = _mm256_set1_ps(0.044715f);
    const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f), half = _mm256_set1_ps(0.5f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 inner = _mm256_mul_ps(beta, _mm256_fmadd_ps(_mm256_mul_ps(kappa, v), _mm256_mul_ps(v, v), v));
        // tanh(u) = 1 - 2 / (exp(2u) + 1)
        const __m256 t = _mm256_sub_ps(one, _mm256_div_ps(two, _mm256_add_ps(exp8(_mm256_add_ps(inner, inner)), one)));
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, t)));
    }
    for (; i < n; ++i) {
        const float v = x[i];
        x[i] = 0.5f * v * (1.0f + std::tanh(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    }
}

}  // namespace strata::vision::detail
