// AVX-512F piece of gemm.h (compiled with the engine's AVX-512 flags; called only when the CPU has AVX-512).
#include <immintrin.h>

#include "gemm.h"

namespace strata::vision::detail {

void kernel_avx512_8x32(int64_t K, const float* A, int64_t lda, const float* bp, float* C, int64_t ldc, int m,
                        int n) {
    const float* a[8];
    for (int i = 0; i < 8; ++i) a[i] = A + (i < m ? i : 0) * lda;
    __m512 c[8][2];
    for (int i = 0; i < 8; ++i) c[i][0] = c[i][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; ++k) {
        const __m512 b0 = _mm512_loadu_ps(bp + k * 32), b1 = _mm512_loadu_ps(bp + k * 32 + 16);
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
            const __m512 v = _mm512_set1_ps(a[i][k]);
            c[i][0] = _mm512_fmadd_ps(v, b0, c[i][0]);
            c[i][1] = _mm512_fmadd_ps(v, b1, c[i][1]);
        }
    }
    alignas(64) float out[8][32];
    for (int i = 0; i < 8; ++i) {
        _mm512_store_ps(out[i], c[i][0]);
        _mm512_store_ps(out[i] + 16, c[i][1]);
    }
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) C[i * ldc + j] = out[i][j];
}

}  // namespace strata::vision::detail
