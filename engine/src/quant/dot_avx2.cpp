// AVX2 (+FMA, F16C) dot kernels: the shared x86 kernels compiled for AVX2. Q2_K, Q3_K and Q6_K use the scalar kernels.
#include "quant/dot_x86.h"
#include "quant/gemv_x86_iq.h"

namespace strata::qk {
void fill_dots_avx2(DotTable& t) { fill_x86_dots(t); fill_x86_multi(t); }
}  // namespace strata::qk
