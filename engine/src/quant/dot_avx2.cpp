// AVX2 (+FMA, F16C) dot kernels: the shared x86 kernels compiled for AVX2.
#include "quant/dot_x86.h"
#include "quant/gemv_x86_iq.h"
#include "quant/gemv_x86_kquant.h"

namespace strata::qk {
void fill_dots_avx2(DotTable& t) { fill_x86_dots(t); fill_x86_multi(t); fill_x86_kquant(t); }
}  // namespace strata::qk
