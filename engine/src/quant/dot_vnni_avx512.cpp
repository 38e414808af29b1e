// AVX-512 + VNNI dot kernels (vpdpbusd instead of maddubs+madd); only used after a CPUID check for AVX512-VNNI.
#pragma GCC target("avx512vnni")
#define STRATA_VNNI 1
#include "quant/dot_x86.h"
#include "quant/gemv_x86_iq.h"
#include "quant/gemv_x86_kquant.h"

namespace strata::qk {
void fill_dots_avx512_vnni(DotTable& t) { fill_x86_dots(t); fill_x86_multi(t); fill_x86_kquant(t); }
}  // namespace strata::qk
