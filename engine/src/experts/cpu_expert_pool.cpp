// CpuExpertPool: experts grouped by the tokens they serve; gate/up rows, then down rows, split across the workers.
#include "experts/cpu_expert_pool.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>

#include "common/error.h"
#include "quant/quant.h"

namespace strata {

CpuExpertPool::CpuExpertPool(int n_workers, bool f32_activations) : pool_(n_workers, false), f32_(f32_activations) {}

void CpuExpertPool::copy(void* dst, const void* src, size_t bytes) {
    const int64_t pieces = std::max<int64_t>(1, std::min<int64_t>(pool_.size() * 4, (int64_t)(bytes >> 20)));
    pool_.parallel_for(pieces, [&](int64_t p0, int64_t p1) {
        const size_t b0 = bytes * p0 / pieces, b1 = bytes * p1 / pieces;
        std::memcpy(static_cast<uint8_t*>(dst) + b0, static_cast<const uint8_t*>(src) + b0, b1 - b0);
    });
}

void CpuExpertPool::rows_dot_f32(const Weight& w, const uint8_t* matrix, int64_t r0, int64_t r1, const float* x,
                                 float* y) {
    const int64_t n = w.ne[0];
    std::vector<float> row(n);
    for (int64_t r = r0; r < r1; ++r) {
        dequantize_row(w.type, matrix + (size_t)r * w.row_bytes, row.data(), n);
        float acc = 0;
        for (int64_t i = 0; i < n; ++i) acc += row[i] * x[i];
        y[r] = acc;
    }
}

void CpuExpertPool::compute(const Weight& gate, const Weight& up, const Weight& down, const float* x,
                            const std::vector<ExpertPair>& pairs, float* out) {
    if (pairs.empty()) return;
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t H = gate.ne[0], I = gate.ne[1], E = gate.ne[2];
    STRATA_CHECK(up.ne[0] == H && up.ne[1] == I && down.ne[0] == I && down.ne[1] == H, "cpu experts: tensor shapes ",
                 H, "x", I, " / ", up.ne[0], "x", up.ne[1], " / ", down.ne[0], "x", down.ne[1], " do not match");
    const size_t ab_g = (act_bytes(gate.type, H) + 63) / 64 * 64;
    const size_t ab_u = (act_bytes(up.type, H) + 63) / 64 * 64;
    const size_t ab_d = (act_bytes(down.type, I) + 63) / 64 * 64;
    std::map<int, std::vector<int>> users;   // expert → indices into pairs, experts ascending
    for (size_t i = 0; i < pairs.size(); ++i) {
        STRATA_CHECK(pairs[i].expert >= 0 && pairs[i].expert < E, "cpu experts: expert id ", pairs[i].expert,
                     " is outside 0..", E - 1);
        users[pairs[i].expert].push_back((int)i);
    }
    std::vector<uint8_t> act_g, act_u, act_h;
    std::vector<float> g, u, h, o;
    const int nt = pool_.size();
    for (const auto& [e, us] : users) {
        const int n = (int)us.size();
        g.resize((size_t)n * I);
        u.resize((size_t)n * I);
        h.resize((size_t)n * I);
        o.resize((size_t)n * H);
        const uint8_t* wg = gate.matrix(e);
        const uint8_t* wu = up.matrix(e);
        const uint8_t* wd = down.matrix(e);
        auto xrow = [&](int i) { return x + (size_t)pairs[us[i]].token * H; };
        if (!f32_) {
            act_g.resize(ab_g * n);
            act_u.resize(ab_u * n);
            act_h.resize(ab_d * n);
            for (int i = 0; i < n; ++i) {
                quantize_act(gate.type, xrow(i), act_g.data() + ab_g * i, H);
                quantize_act(up.type, xrow(i), act_u.data() + ab_u * i, H);
            }
        }
        pool_.parallel_for(nt, [&](int64_t p0, int64_t p1) {
            const int64_t r0 = I * p0 / nt, r1 = I * p1 / nt;
            if (r0 >= r1) return;
            if (f32_) {
                for (int i = 0; i < n; ++i) {
                    rows_dot_f32(gate, wg, r0, r1, xrow(i), g.data() + (size_t)i * I);
                    rows_dot_f32(up, wu, r0, r1, xrow(i), u.data() + (size_t)i * I);
                }
                return;
            }
            gemv_rows_multi(gate.type, H, wg, gate.row_bytes, r0, r1, act_g.data(), n, ab_g, g.data(), I);
            gemv_rows_multi(up.type, H, wu, up.row_bytes, r0, r1, act_u.data(), n, ab_u, u.data(), I);
        });
        for (size_t i = 0; i < (size_t)n * I; ++i) h[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
        if (!f32_)
            for (int i = 0; i < n; ++i) quantize_act(down.type, h.data() + (size_t)i * I, act_h.data() + ab_d * i, I);
        pool_.parallel_for(nt, [&](int64_t p0, int64_t p1) {
            const int64_t r0 = H * p0 / nt, r1 = H * p1 / nt;
            if (r0 >= r1) return;
            if (f32_) {
                for (int i = 0; i < n; ++i)
                    rows_dot_f32(down, wd, r0, r1, h.data() + (size_t)i * I, o.data() + (size_t)i * H);
                return;
            }
            gemv_rows_multi(down.type, I, wd, down.row_bytes, r0, r1, act_h.data(), n, ab_d, o.data(), H);
        });
        for (int i = 0; i < n; ++i)
            std::memcpy(out + (size_t)us[i] * H, o.data() + (size_t)i * H, (size_t)H * sizeof(float));
    }
    pairs_done_ += (int64_t)pairs.size();
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace strata
