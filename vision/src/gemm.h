// Float32 matrix products for the vision tower: C = A · B with B packed in column panels (nr columns each, the
// kernel's width), register-blocked micro-kernels for scalar / AVX2+FMA / AVX-512 chosen at run time from the
// engine's active_isa(), plus vectorised exp and tanh-GELU. Every output element is one dot product in k order
// (FMA chains where the CPU has them), so results do not depend on the thread count or the blocking.
#pragma once
#include <cstddef>
#include <cstdint>

#include "gguf/ggml_types.h"

namespace strata::vision {

// C[i*ldc + j] = sum_k A[i*lda + k] * panel(k, j) for i < m (<= mr), j < n (<= nr); bp is one K x nr panel.
using MicroKernel = void (*)(int64_t K, const float* A, int64_t lda, const float* bp, float* C, int64_t ldc, int m,
                             int n);
struct Gemm {
    int mr = 0, nr = 0;
    MicroKernel kernel = nullptr;
    const char* name = "";
};
const Gemm& gemm();   // the best for this CPU (follows the engine's active_isa(), e.g. STRATA_ISA)

// Panels of B (K x n_cols): panel p holds K x nr floats, element (k, j) = B[k][p*nr + j] at [k*nr + j]; columns past
// n_cols are zero. Size: panels(n_cols, nr) * K * nr floats.
inline int64_t panels(int64_t n_cols, int nr) { return (n_cols + nr - 1) / nr; }

// Packs rows r0..r0+n of a weight matrix W (rows of K values of type t, row_bytes apart) as B = W^T panels:
// B[k][j] = W[r0 + j][k]. tmp holds K floats.
void pack_weight_rows(GgmlType t, const uint8_t* w, size_t row_bytes, int64_t K, int64_t r0, int64_t n, int nr,
                      float* dst, float* tmp);
// Packs a row-major float matrix M (rows x cols, ld apart) as panels of B = M (K = rows, columns = cols).
void pack_columns(const float* m, int64_t ld, int64_t rows, int64_t cols, int nr, float* dst);
// Packs B = M^T for a row-major float matrix M (n rows of K, ld apart): B[k][j] = M[j][k].
void pack_rows_f32(const float* m, int64_t ld, int64_t n, int64_t K, int nr, float* dst);

// C (M x n_cols, ldc apart) = A (M x K, lda apart) · B (packed panels of K x n_cols); single thread.
void gemm_packed(const float* A, int64_t lda, int64_t M, const float* bp, int64_t K, int64_t n_cols, float* C,
                 int64_t ldc);

// x[i] = exp(x[i] * scale - shift) for i < n; returns the sum (in double).
double exp_scaled(float* x, int64_t n, float scale, float shift);
// x[i] = gelu_tanh(x[i]) (torch gelu approximate='tanh').
void gelu_tanh_inplace(float* x, int64_t n);

namespace detail {   // per-ISA pieces (gemm_avx2.cpp, gemm_avx512.cpp)
void kernel_avx2_6x16(int64_t K, const float* A, int64_t lda, const float* bp, float* C, int64_t ldc, int m, int n);
void kernel_avx512_8x32(int64_t K, const float* A, int64_t lda, const float* bp, float* C, int64_t ldc, int m,
                        int n);
double exp_scaled_avx2(float* x, int64_t n, float scale, float shift);
void gelu_tanh_avx2(float* x, int64_t n);
}  // namespace detail

}  // namespace strata::vision
