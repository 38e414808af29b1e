// fp16 / bf16 conversions: exact decode of every half, round-to-nearest-even encode, overflow to inf.
#include <cmath>
#include <cstring>
#include "check.h"
#include "quant/quant.h"

using namespace strata;

int main() {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
        float f = fp16_to_f32((uint16_t)h);
        if (std::isnan(f)) { bad += ((h & 0x7c00) != 0x7c00 || !(h & 0x3ff)); continue; }
        bad += f32_to_fp16(f) != h;   // every finite/inf half survives a round trip
    }
    CHECK_MSG(bad == 0, "%d halves do not round-trip", bad);
    CHECK(fp16_to_f32(0x3c00) == 1.0f);
    CHECK(fp16_to_f32(0x0001) == std::ldexp(1.0f, -24));   // smallest subnormal
    CHECK(fp16_to_f32(0x7bff) == 65504.0f);
    CHECK(f32_to_fp16(65519.0f) == 0x7bff);
    CHECK(f32_to_fp16(65520.0f) == 0x7c00);                // halfway to the next step rounds to inf
    CHECK(f32_to_fp16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);   // tie -> even
    CHECK(f32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
    CHECK(f32_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);   // tie between 0 and the smallest subnormal -> 0
    CHECK(f32_to_fp16(std::ldexp(1.5f, -25)) == 0x0001);
    CHECK(f32_to_fp16(-0.0f) == 0x8000);
    CHECK((f32_to_fp16(NAN) & 0x7c00) == 0x7c00 && (f32_to_fp16(NAN) & 0x3ff));
    CHECK(bf16_to_f32(0x3f80) == 1.0f);
    CHECK(bf16_to_f32(0xc000) == -2.0f);
    return test::exit_code();
}
