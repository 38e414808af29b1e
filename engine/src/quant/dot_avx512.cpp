// AVX-512 (F/BW/VL/DQ) dot kernels: the shared x86 kernels with 512-bit float loops and mask-register sign flips.
#include "quant/dot_x86.h"
#include "quant/gemv_x86_iq.h"
#include "quant/gemv_x86_kquant.h"

namespace strata::qk {
void fill_dots_avx512(DotTable& t) { fill_x86_dots(t); fill_x86_multi(t); fill_x86_kquant(t); }
}  // namespace strata::qk
