// Backend::rope_multi on the CPU (the reference): with the three position rows equal it gives rope's bits exactly
// (text positions through the multimodal path); otherwise frequency j rotates by the position of its M-RoPE axis
// (MODEL.md §4: sections [2, 1, 1] on 4 frequencies give t, h, w, t), checked against a direct formula.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "check.h"

using namespace strata;

int main() {
    CpuBackend be(1);
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    const int T = 9, heads = 3, hd = 32, n_rot = 8;
    const float theta = 10000.0f;
    std::vector<float> x((size_t)T * heads * hd);
    for (float& v : x) v = nd(rng);

    // Equal rows: the same bits as rope.
    std::vector<int32_t> pos(T), pos3(3 * T);
    for (int t = 0; t < T; ++t) pos[t] = 37 + 5 * t;
    for (int a = 0; a < 3; ++a)
        for (int t = 0; t < T; ++t) pos3[a * T + t] = pos[t];
    for (int sec : {0, 1, 2, 11}) {
        std::vector<float> a = x, b = x;
        be.rope(a.data(), T, heads, hd, n_rot, theta, pos.data());
        be.rope_multi(b.data(), T, heads, hd, n_rot, theta, pos3.data(), sec, sec);
        CHECK_MSG(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0, "sections %d: not rope's bits", sec);
    }

    // Different rows, sections [2, 1, 1]: frequencies 0..3 take t, h, w, t.
    for (int t = 0; t < T; ++t) {
        pos3[0 * T + t] = 10 + t;
        pos3[1 * T + t] = 100 + 3 * t;
        pos3[2 * T + t] = 1000 + 7 * t;
    }
    std::vector<float> y = x;
    be.rope_multi(y.data(), T, heads, hd, n_rot, theta, pos3.data(), 1, 1);
    const int axis[4] = {0, 1, 2, 0};
    double worst = 0;
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < heads; ++h)
            for (int j = 0; j < n_rot / 2; ++j) {
                const float* xh = x.data() + ((size_t)t * heads + h) * hd;
                const float* yh = y.data() + ((size_t)t * heads + h) * hd;
                const double inv = 1.0 / std::pow((double)theta, 2.0 * j / n_rot);
                const double ang = pos3[axis[j] * T + t] * inv;
                const double e0 = xh[j] * std::cos(ang) - xh[j + n_rot / 2] * std::sin(ang);
                const double e1 = xh[j + n_rot / 2] * std::cos(ang) + xh[j] * std::sin(ang);
                worst = std::fmax(worst, std::fabs(e0 - yh[j]));
                worst = std::fmax(worst, std::fabs(e1 - yh[j + n_rot / 2]));
            }
    CHECK_MSG(worst < 1e-3, "M-RoPE axes: max error %g", worst);
    // Dims past n_rot are untouched.
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < heads; ++h)
            for (int d = n_rot; d < hd; ++d) {
                const size_t i = ((size_t)t * heads + h) * hd + d;
                CHECK(x[i] == y[i]);
            }
    return test::exit_code();
}
