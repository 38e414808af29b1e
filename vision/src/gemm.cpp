#include "gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/quant.h"

namespace strata::vision {
namespace {

constexpr int kScalarMr = 4, kScalarNr = 16;

void kernel_scalar(int64_t K, const float* A, int64_t lda, const float* bp, float* C, int64_t ldc, int m, int n) {
    float c[kScalarMr][kScalarNr] = {};
    const float* a[kScalarMr];
    for (int i = 0; i < kScalarMr; ++i) a[i] = A + (i < m ? i : 0) * lda;
    for (int64_t k = 0; k < K; ++k) {
        const float* b = bp + k * kScalarNr;
        for (int i = 0; i < kScalarMr; ++i) {
            const float av = a[i][k];
            for (int j = 0; j < kScalarNr; ++j) c[i][j] += av * b[j];
        }
    }
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) C[i * ldc + j] = c[i][j];
}

inline float gelu_tanh_1(float x) {
    const float kBeta = 0.7978845608028654f, kKappa = 0.044715f;
    return 0.5f * x * (1.0f + std::tanh(kBeta * (x + kKappa * x * x * x)));
}

}  // namespace

const Gemm& gemm() {
    static const Gemm scalar{kScalarMr, kScalarNr, kernel_scalar, "scalar"};
    static const Gemm avx2{6, 16, detail::kernel_avx2_6x16, "avx2"};
    static const Gemm avx512{8, 32, detail::kernel_avx512_8x32, "avx512"};
    switch (active_isa()) {
    case Isa::avx512: return avx512;
    case Isa::avx2: return avx2;
    default: return scalar;
    }
}

void pack_weight_rows(GgmlType t, const uint8_t* w, size_t row_bytes, int64_t K, int64_t r0, int64_t n, int nr,
                      float* dst, float* tmp) {
    const int64_t np = panels(n, nr);
    std::memset(dst, 0, (size_t)(np * K * nr) * sizeof(float));
    for (int64_t j = 0; j < n; ++j) {
        const float* row;
        if (t == GgmlType::F32) {
            row = (const float*)(w + (size_t)(r0 + j) * row_bytes);
        } else {
            dequantize_row(t, w + (size_t)(r0 + j) * row_bytes, tmp, K);
            row = tmp;
        }
        float* p = dst + (j / nr) * K * nr + (j % nr);
        for (int64_t k = 0; k < K; ++k) p[k * nr] = row[k];
    }
}

void pack_columns(const float* m, int64_t ld, int64_t rows, int64_t cols, int nr, float* dst) {
    const int64_t np = panels(cols, nr);
    for (int64_t p = 0; p < np; ++p) {
        const int64_t c0 = p * nr, nc = std::min<int64_t>(nr, cols - c0);
        float* d = dst + p * rows * nr;
        for (int64_t k = 0; k < rows; ++k) {
            const float* src = m + k * ld + c0;
            int64_t j = 0;
            for (; j < nc; ++j) d[k * nr + j] = src[j];
            for (; j < nr; ++j) d[k * nr + j] = 0.0f;
        }
    }
}

void pack_rows_f32(const float* m, int64_t ld, int64_t n, int64_t K, int nr, float* dst) {
    const int64_t np = panels(n, nr);
    std::memset(dst, 0, (size_t)(np * K * nr) * sizeof(float));
    for (int64_t j = 0; j < n; ++j) {
        const float* row = m + j * ld;
        float* p = dst + (j / nr) * K * nr + (j % nr);
        for (int64_t k = 0; k < K; ++k) p[k * nr] = row[k];
    }
}

void gemm_packed(const float* A, int64_t lda, int64_t M, const float* bp, int64_t K, int64_t n_cols, float* C,
                 int64_t ldc) {
    const Gemm& g = gemm();
    const int64_t np = panels(n_cols, g.nr);
    for (int64_t i0 = 0; i0 < M; i0 += g.mr) {
        const int m = (int)std::min<int64_t>(g.mr, M - i0);
        for (int64_t p = 0; p < np; ++p) {
            const int n = (int)std::min<int64_t>(g.nr, n_cols - p * g.nr);
            g.kernel(K, A + i0 * lda, lda, bp + p * K * g.nr, C + i0 * ldc + p * g.nr, ldc, m, n);
        }
    }
}

double exp_scaled(float* x, int64_t n, float scale, float shift) {
    if (active_isa() != Isa::scalar) return detail::exp_scaled_avx2(x, n, scale, shift);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] * scale - shift);
        s += x[i];
    }
    return s;
}

void gelu_tanh_inplace(float* x, int64_t n) {
    if (active_isa() != Isa::scalar) return detail::gelu_tanh_avx2(x, n);
    for (int64_t i = 0; i < n; ++i) x[i] = gelu_tanh_1(x[i]);
}

}  // namespace strata::vision
