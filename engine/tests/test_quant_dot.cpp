// Every dot kernel of every ISA this CPU has (and gemv_rows) agrees with an f64 dot of the reference-dequantized
// weights against the dequantized quantized activations, within a rounding bound; odd lengths and extreme scales.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>
#include "check.h"
#include "quant/quant.h"

using namespace strata;

namespace {

struct TypeCase {
    GgmlType type;
    std::vector<int> fp16_offsets;  // byte offsets of fp16 scales within a block
    std::vector<int> quant_bytes;   // [begin, end) byte ranges of the quant bits (zeroed to isolate the min term)
};

const std::vector<TypeCase> kCases = {
    {GgmlType::F32, {}, {}},       {GgmlType::F16, {}, {}},        {GgmlType::BF16, {}, {}},
    {GgmlType::Q8_0, {0}, {}},     {GgmlType::Q4_0, {0}, {}},      {GgmlType::Q5_0, {0}, {}},
    {GgmlType::Q4_1, {0, 2}, {4, 20}}, {GgmlType::Q5_1, {0, 2}, {4, 24}},
    {GgmlType::IQ4_NL, {0}, {}},   {GgmlType::Q2_0, {0}, {}},      {GgmlType::Q2_K, {80, 82}, {16, 80}},
    {GgmlType::Q3_K, {108}, {}},   {GgmlType::Q4_K, {0, 2}, {16, 144}}, {GgmlType::Q5_K, {0, 2}, {16, 176}},
    {GgmlType::Q6_K, {208}, {}},   {GgmlType::IQ4_XS, {0}, {}},    {GgmlType::IQ2_XXS, {0}, {}},
    {GgmlType::IQ2_XS, {0}, {}},   {GgmlType::IQ2_S, {0}, {}},     {GgmlType::IQ3_XXS, {0}, {}},
    {GgmlType::IQ3_S, {0}, {}},
};

std::mt19937_64 rng(1234);

double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }

enum class Scales { normal, huge, tiny };

// Every kernel set this CPU can run: scalar, avx2, avx512 without and (if present) with VNNI.
struct Path { Isa isa; bool vnni; };
std::vector<Path> paths() {
    std::vector<Path> p;
    for (int isa = 0; isa <= (int)cpu_best_isa(); ++isa) p.push_back({(Isa)isa, false});
    set_avx512_vnni(true);
    if (cpu_best_isa() == Isa::avx512 && avx512_vnni_active()) p.push_back({Isa::avx512, true});
    return p;
}
const char* path_name(const Path& p) { return p.vnni ? "avx512-vnni" : isa_name(p.isa); }

uint16_t random_scale(Scales s) {
    double mag = s == Scales::huge ? uniform(30000, 65504) : s == Scales::tiny ? std::exp2(uniform(-24, -13))
                                                                               : std::exp2(uniform(-12, 2));
    return f32_to_fp16((float)(uniform(0, 1) < 0.5 ? -mag : mag));
}

std::vector<uint8_t> random_weights(const TypeCase& c, int64_t n, Scales s) {
    const GgmlTypeInfo& info = ggml_type_info(c.type);
    std::vector<uint8_t> w(ggml_row_bytes(c.type, n));
    if (info.block_elems == 1) {  // plain floats
        for (int64_t i = 0; i < n; ++i) {
            float v = (float)(uniform(-1, 1) * (s == Scales::huge ? 1e4 : s == Scales::tiny ? 1e-4 : 1.0));
            if (c.type == GgmlType::F32) std::memcpy(&w[4 * i], &v, 4);
            else {
                uint32_t bits;
                std::memcpy(&bits, &v, 4);
                uint16_t h = c.type == GgmlType::F16 ? f32_to_fp16(v) : (uint16_t)(bits >> 16);
                std::memcpy(&w[2 * i], &h, 2);
            }
        }
        return w;
    }
    for (auto& b : w) b = (uint8_t)rng();
    for (size_t blk = 0; blk < w.size() / info.block_bytes; ++blk)
        for (int off : c.fp16_offsets) {
            uint16_t h = random_scale(s);
            std::memcpy(&w[blk * info.block_bytes + off], &h, 2);
        }
    return w;
}

// The activation values the kernels actually see, in f64.
std::vector<double> dequantize_act(GgmlType t, const std::vector<uint8_t>& act, int64_t n) {
    std::vector<double> a(n);
    switch (act_format(t)) {
    case ActFormat::F32:
        for (int64_t i = 0; i < n; ++i) { float v; std::memcpy(&v, &act[4 * i], 4); a[i] = v; }
        break;
    case ActFormat::Q8_0:
        for (int64_t b = 0; b < n / 32; ++b) {
            uint16_t h; std::memcpy(&h, &act[34 * b], 2);
            for (int j = 0; j < 32; ++j) a[32 * b + j] = (double)fp16_to_f32(h) * (int8_t)act[34 * b + 2 + j];
        }
        break;
    case ActFormat::Q8_K:
        for (int64_t b = 0; b < n / 256; ++b) {
            float d; std::memcpy(&d, &act[292 * b], 4);
            for (int j = 0; j < 256; ++j) a[256 * b + j] = (double)d * (int8_t)act[292 * b + 4 + j];
        }
        break;
    }
    return a;
}

void check_case(const TypeCase& c, int64_t n, Scales s, int rows) {
    const GgmlTypeInfo& info = ggml_type_info(c.type);
    const size_t row_bytes = ggml_row_bytes(c.type, n);
    std::vector<uint8_t> w;
    for (int r = 0; r < rows; ++r) {
        auto row = random_weights(c, n, s);
        w.insert(w.end(), row.begin(), row.end());
    }
    double amag = s == Scales::huge ? 1e4 : s == Scales::tiny ? 1e-4 : 1.0;
    std::vector<float> x(n);
    for (auto& v : x) v = (float)(uniform(-1, 1) * amag * (uniform(0, 1) < 0.02 ? 50 : 1));
    std::vector<uint8_t> act(act_bytes(c.type, n));
    quantize_act(c.type, x.data(), act.data(), n);
    std::vector<double> a = dequantize_act(c.type, act, n);

    std::vector<float> wf(n), wmin(n, 0.0f);
    for (int r = 0; r < rows; ++r) {
        const uint8_t* wr = w.data() + r * row_bytes;
        dequantize_row(c.type, wr, wf.data(), n);
        if (!c.quant_bytes.empty()) {  // the -dmin*m part alone: the kernels may cancel it against d*sc*q
            std::vector<uint8_t> z(wr, wr + row_bytes);
            for (size_t blk = 0; blk < row_bytes / info.block_bytes; ++blk)
                std::memset(&z[blk * info.block_bytes + c.quant_bytes[0]], 0, c.quant_bytes[1] - c.quant_bytes[0]);
            dequantize_row(c.type, z.data(), wmin.data(), n);
        }
        double exact = 0, mag = 0;
        for (int64_t i = 0; i < n; ++i) {
            exact += (double)wf[i] * a[i];
            mag += (std::fabs((double)wf[i]) + 2 * std::fabs((double)wmin[i])) * std::fabs(a[i]);
        }
        const int64_t steps = info.block_elems == 1 ? n : n / info.block_elems * 2;
        const double tol = (double)(steps + 8) * std::exp2(-23) * mag + 1e-35;
        for (const Path& p : paths()) {
            set_avx512_vnni(p.vnni);
            float got = vec_dot_isa(p.isa, c.type, n, wr, act.data());
            CHECK_MSG(std::fabs(got - exact) <= tol, "%s %s n=%lld scales=%d row %d: got %.9g, f64 %.9g, tol %.3g",
                      info.name, path_name(p), (long long)n, (int)s, r, got, exact, tol);
        }
    }
    // gemv_rows on every ISA equals vec_dot of that ISA, row by row, and leaves rows outside [r0, r1) alone.
    for (const Path& p : paths()) {
        set_avx512_vnni(p.vnni);
        set_active_isa(p.isa);
        std::vector<float> y(rows, -7.0f);
        gemv_rows(c.type, n, w.data(), row_bytes, 1, rows, act.data(), y.data());
        CHECK(y[0] == -7.0f);
        for (int r = 1; r < rows; ++r) {
            float want = vec_dot_isa(p.isa, c.type, n, w.data() + r * row_bytes, act.data());
            CHECK_MSG(y[r] == want, "%s gemv_rows %s row %d: %g != %g", info.name, path_name(p), r, y[r], want);
        }
    }
    set_active_isa(cpu_best_isa());
    set_avx512_vnni(true);
}

// gemv_rows_multi on every ISA equals vec_dot of that ISA for each (row, activation) pair bit for bit, for 1..11
// activations (more than one batch of 8), a gap between activation rows and a y stride; other y entries untouched.
void check_multi(const TypeCase& c, int64_t n) {
    const GgmlTypeInfo& info = ggml_type_info(c.type);
    const size_t row_bytes = ggml_row_bytes(c.type, n);
    const int rows = 5, max_act = 11;
    std::vector<uint8_t> w;
    for (int r = 0; r < rows; ++r) {
        auto row = random_weights(c, n, Scales::normal);
        w.insert(w.end(), row.begin(), row.end());
    }
    const size_t act_stride = act_bytes(c.type, n) + 12;  // not a multiple of anything the kernels like
    std::vector<uint8_t> acts(act_stride * max_act);
    std::vector<float> x(n);
    for (int t = 0; t < max_act; ++t) {
        for (auto& v : x) v = (float)uniform(-1, 1);
        quantize_act(c.type, x.data(), acts.data() + t * act_stride, n);
    }
    for (const Path& p : paths()) {
        set_avx512_vnni(p.vnni);
        set_active_isa(p.isa);
        for (int na : {1, 2, 3, 5, 8, 11}) {
            const size_t y_stride = rows + 3;
            std::vector<float> y(y_stride * na, -7.0f);
            gemv_rows_multi(c.type, n, w.data(), row_bytes, 1, rows, acts.data(), na, act_stride, y.data(), y_stride);
            for (int t = 0; t < na; ++t) {
                CHECK(y[t * y_stride] == -7.0f && y[t * y_stride + rows] == -7.0f);
                for (int r = 1; r < rows; ++r) {
                    float want = vec_dot_isa(p.isa, c.type, n, w.data() + r * row_bytes, acts.data() + t * act_stride);
                    float got = y[t * y_stride + r];
                    CHECK_MSG(got == want, "%s gemv_rows_multi %s n=%lld na=%d act %d row %d: %.9g != vec_dot %.9g",
                              info.name, path_name(p), (long long)n, na, t, r, got, want);
                }
            }
        }
    }
    set_active_isa(cpu_best_isa());
    set_avx512_vnni(true);
}

// Q2_0 gives the same bits on every SIMD path (AVX2, AVX-512 with and without VNNI): the same integer sums and the
// same float steps, so a CPU may take whichever of them streams fastest without changing a result.
void check_q2_0_paths_agree() {
    const int64_t n = 2560;
    const TypeCase* q2 = nullptr;
    for (const auto& c : kCases)
        if (c.type == GgmlType::Q2_0) q2 = &c;
    CHECK(q2 != nullptr);
    std::vector<float> x(n);
    std::vector<uint8_t> act(act_bytes(GgmlType::Q2_0, n));
    for (int r = 0; r < 64; ++r) {
        const auto w = random_weights(*q2, n, r % 3 == 0 ? Scales::huge : Scales::normal);
        for (auto& v : x) v = (float)uniform(-1, 1);
        quantize_act(GgmlType::Q2_0, x.data(), act.data(), n);
        std::vector<float> got;
        for (const Path& p : paths()) {
            if (p.isa == Isa::scalar) continue;
            set_avx512_vnni(p.vnni);
            got.push_back(vec_dot_isa(p.isa, GgmlType::Q2_0, n, w.data(), act.data()));
        }
        for (size_t k = 1; k < got.size(); ++k)
            CHECK_MSG(std::memcmp(&got[k], &got[0], 4) == 0, "Q2_0 row %d: SIMD path %zu gives %.9g, AVX2 %.9g", r, k,
                      got[k], got[0]);
    }
    set_avx512_vnni(true);
}

}  // namespace

int main() {
    std::printf("kernel sets tested:");
    for (const Path& p : paths()) std::printf(" %s", path_name(p));
    std::printf("\n");
    for (const auto& c : kCases) {
        CHECK(quant_supported(c.type));
        const GgmlTypeInfo& info = ggml_type_info(c.type);
        int64_t unit = info.block_elems;
        if (act_format(c.type) == ActFormat::Q8_0 && unit < 32) unit = 32;
        std::vector<int64_t> lengths;
        if (info.block_elems == 1) lengths = {1, 7, 15, 33, 100, 257, 2560};
        else lengths = {unit, 2 * unit, 3 * unit, 4 * unit, 5 * unit, (2560 / unit) * unit, 11 * unit};
        for (int64_t n : lengths)
            for (Scales s : {Scales::normal, Scales::huge, Scales::tiny}) check_case(c, n, s, 3);
        check_multi(c, lengths[1]);
        check_multi(c, lengths[3]);
        check_multi(c, lengths[4]);
        check_multi(c, lengths[5]);
    }
    check_q2_0_paths_agree();
    CHECK(!quant_supported(GgmlType::Q8_1));
    CHECK(!quant_supported(GgmlType::IQ1_S));
    return test::exit_code();
}
