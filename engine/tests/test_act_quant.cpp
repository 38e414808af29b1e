// quantize_act's Q8_0 / Q8_K / Q2_0 activation blocks against a std::nearbyint reference, bit for bit, on millions of
// random values and on adversarial ones: products exactly on and one ulp beside .5 ties, +-amax, zeros, denormals,
// tiny amax (1/d infinite), huge amax, NaN in a Q8_K row.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>
#include "check.h"
#include "quant/quant.h"
#include "quant/quant_internal.h"

using namespace strata;
using namespace strata::qk;

namespace {

// The scalar conversion the quantizers always had; a non-finite product gives 0, which is what (int8_t) of
// a NaN or infinite float gave on x86 (cvttss2si's 0x80000000), made explicit since C++ leaves it undefined.
int8_t to_int8(float v) { return std::isfinite(v) ? (int8_t)(int32_t)v : (int8_t)0; }

void reference_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < 32; ++j) y[i].qs[j] = to_int8(std::nearbyint(x[j] * id));
    }
}

void reference_q8_k(const float* x, BlockQ8_K* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        float amax = 0.0f;
        for (int j = 0; j < QK_K; ++j) amax = std::fmax(amax, std::fabs(x[j]));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = d;
        for (int j = 0; j < QK_K; ++j)
            y[i].qs[j] = (int8_t)std::fmin(127.0f, std::fmax(-127.0f, std::nearbyint(x[j] * id)));
        for (int g = 0; g < 16; ++g) {
            int s = 0;
            for (int j = 0; j < 16; ++j) s += y[i].qs[16 * g + j];
            y[i].bsums[g] = (int16_t)s;
        }
    }
}

// Compares one row (n a multiple of 256) through quantize_act with the reference; returns mismatching bytes.
int64_t compare_row(const std::vector<float>& x, const char* what) {
    const int64_t n = (int64_t)x.size();
    int64_t bad = 0;
    {
        std::vector<uint8_t> got(act_bytes(GgmlType::Q8_0, n)), want(got.size());
        quantize_act(GgmlType::Q8_0, x.data(), got.data(), n);
        reference_q8_0(x.data(), (BlockQ8_0*)want.data(), n / 32);
        for (size_t k = 0; k < got.size(); ++k) bad += got[k] != want[k];
    }
    {
        // Q2_0 appends groups derived from the Q8_0 blocks; its blocks must be the same bytes.
        std::vector<uint8_t> got(act_bytes(GgmlType::Q2_0, n)), want(act_bytes(GgmlType::Q8_0, n));
        quantize_act(GgmlType::Q2_0, x.data(), got.data(), n);
        reference_q8_0(x.data(), (BlockQ8_0*)want.data(), n / 32);
        for (size_t k = 0; k < want.size(); ++k) bad += got[k] != want[k];
    }
    {
        std::vector<uint8_t> got(act_bytes(GgmlType::Q4_K, n)), want(got.size());
        quantize_act(GgmlType::Q4_K, x.data(), got.data(), n);
        reference_q8_k(x.data(), (BlockQ8_K*)want.data(), n / QK_K);
        for (size_t k = 0; k < got.size(); ++k) bad += got[k] != want[k];
    }
    CHECK_MSG(bad == 0, "%s: %lld bytes differ from the std::nearbyint reference", what, (long long)bad);
    return bad;
}

// Values whose product with id (as the quantizer computes id for a block of this amax) is on a .5 tie or
// within a few ulps of one, for every tie from -127.5 to 126.5, in blocks whose first value is amax.
std::vector<float> tie_row(float amax, int block, std::mt19937& rng) {
    float d = amax / 127.0f, id = 1.0f / d;
    std::vector<float> x;
    std::uniform_int_distribution<int> tie(-128, 126), step(-3, 3);
    while (x.size() < 256 * 40) {
        if (x.size() % block == 0) { x.push_back((rng() & 1) ? amax : -amax); continue; }
        float t = (float)tie(rng) + 0.5f;
        float v = t / id;
        for (int s = step(rng); s != 0; s += s > 0 ? -1 : 1) v = std::nextafter(v, s > 0 ? FLT_MAX : -FLT_MAX);
        if (std::fabs(v) > amax) v = std::copysign(amax, v);
        x.push_back(v);
    }
    return x;
}

}  // namespace

int main() {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    int64_t values = 0;

    // Random rows at scales from 1e-30 to 1e30 (2560 wide, as the model's hidden size), a few outliers each.
    std::vector<float> x(2560);
    for (int r = 0; r < 600; ++r) {
        float scale = std::pow(10.0f, (float)(r % 61) - 30.0f);
        for (float& v : x) v = normal(rng) * scale;
        for (int k = 0; k < 8; ++k) x[rng() % x.size()] *= 50.0f;
        compare_row(x, "random row");
        values += (int64_t)x.size();
    }
    // Ties after the multiply: products exactly k + 0.5 and one to three ulps either side, for many amax.
    for (int r = 0; r < 200; ++r) {
        float amax = std::ldexp(1.0f + (float)(rng() % 1000000) / 1000000.0f, (int)(rng() % 60) - 30);
        std::vector<float> t32 = tie_row(amax, 32, rng), t256 = tie_row(amax, 256, rng);
        compare_row(t32, "ties, Q8_0 blocks");
        compare_row(t256, "ties, Q8_K blocks");
        values += (int64_t)(t32.size() + t256.size());
    }
    // Near +-127: every value a few ulps under amax, and amax itself.
    for (int r = 0; r < 50; ++r) {
        float amax = std::ldexp(1.0f + (float)(rng() % 1000) / 1000.0f, (int)(rng() % 40) - 20);
        std::vector<float> y(2560);
        for (size_t k = 0; k < y.size(); ++k) {
            float v = amax;
            for (int s = (int)(rng() % 6); s > 0; --s) v = std::nextafter(v, 0.0f);
            y[k] = (k % 32 == 0 || rng() & 1) ? (rng() & 1 ? amax : -amax) : (rng() & 1 ? v : -v);
        }
        compare_row(y, "near +-127");
        values += (int64_t)y.size();
    }
    // Special magnitudes: zeros, -0, denormals alone (tiny amax: d underflows, 1/d infinite), denormals beside
    // normal values, huge amax, FLT_MAX, the smallest amax whose 1/d is finite.
    std::vector<std::vector<float>> specials;
    specials.push_back(std::vector<float>(512, 0.0f));
    specials.push_back(std::vector<float>(512, -0.0f));
    for (float base : {FLT_TRUE_MIN, 1e-42f, 1e-39f, 3e-37f, 4e-37f, 1e-30f, 1e30f, 1e38f, FLT_MAX}) {
        std::vector<float> y(512);
        for (float& v : y) v = base * (float)(int)(rng() % 200 - 100) / 100.0f;
        specials.push_back(y);
        for (size_t k = 0; k < y.size(); k += 3) y[k] = normal(rng);  // denormal / tiny next to normal values
        specials.push_back(y);
    }
    {
        std::vector<float> y(512, 0.0f);
        for (size_t k = 0; k < y.size(); ++k) y[k] = (k % 5 == 0) ? std::nanf("") : normal(rng);
        specials.push_back(y);
    }
    for (const auto& y : specials) { compare_row(y, "special values"); values += (int64_t)y.size(); }

    std::printf("test_act_quant: %lld values, %s\n", (long long)values, test::failures() ? "FAILED" : "ok");
    return test::exit_code();
}
