// Block formats on the CPU: reference (scalar) dequantizers, activation quantizers and dot products,
// plus AVX2 / AVX-512 variants chosen at run time from CPUID (never AMX). Every SIMD path must equal or
// closely track its scalar path (tests/test_quant_*.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include "gguf/ggml_types.h"

namespace strata {

enum class Isa { scalar = 0, avx2 = 1, avx512 = 2 };
Isa cpu_best_isa();                 // what this CPU supports (cached CPUID probe)
Isa active_isa();                   // what the kernels use now (defaults to cpu_best_isa())
void set_active_isa(Isa isa);       // tests and benchmarks; clamps to cpu_best_isa()
const char* isa_name(Isa isa);
// Within Isa::avx512, the VNNI kernels are used when CPUID reports AVX512-VNNI; tests and benchmarks can turn
// them off to exercise the plain AVX-512 kernels. avx512_vnni_active() says whether they are in use.
void set_avx512_vnni(bool enabled);
bool avx512_vnni_active();

// True for the weight types the engine can compute with (dequantize + dot).
bool quant_supported(GgmlType t);

// Reference dequantizer: n elements (a multiple of the block size) from src to f32. Always scalar.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

// Activations are quantized once per row of input and then dotted with every weight row. A Q8_0 / Q8_K activation
// row starts with those blocks; some weight types append kernel-specific data (Q2_0: a reordered copy with block
// sums), so size buffers with act_bytes only.
enum class ActFormat { F32, Q8_0, Q8_K };
ActFormat act_format(GgmlType weight_type);
size_t act_bytes(GgmlType weight_type, int64_t n);
void quantize_act(GgmlType weight_type, const float* x, void* act, int64_t n);

// dot(weight row of n elements, activation row prepared by quantize_act). Uses active_isa().
float vec_dot(GgmlType weight_type, int64_t n, const void* weight_row, const void* act);
// The same with an explicit ISA (tests compare all paths).
float vec_dot_isa(Isa isa, GgmlType weight_type, int64_t n, const void* weight_row, const void* act);

// y[r] = dot(row r of W, act) for r in [r0, r1); W rows are row_bytes apart. Uses active_isa().
void gemv_rows(GgmlType weight_type, int64_t n, const void* w, size_t row_bytes, int64_t r0, int64_t r1,
               const void* act, float* y);

// Several activation rows against each weight row, each weight row read once (prompts, speculative verify):
// y[t * y_stride + r] = dot(row r of W, act + t * act_stride) for t in [0, n_act), r in [r0, r1).
// Every value equals what gemv_rows / vec_dot give for that activation alone, bit for bit.
void gemv_rows_multi(GgmlType weight_type, int64_t n, const void* w, size_t row_bytes, int64_t r0, int64_t r1,
                     const void* acts, int n_act, size_t act_stride, float* y, size_t y_stride);

float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
float bf16_to_f32(uint16_t h);

}  // namespace strata
