// avx512 dot kernels (placeholder until the SIMD kernels land): the scalar kernels are used.
#include "quant/quant_internal.h"
namespace strata::qk {
void fill_dots_avx512(DotTable&) {}
}  // namespace strata::qk
