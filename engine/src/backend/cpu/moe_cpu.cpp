#include "backend/cpu/moe_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "quant/quant.h"

namespace strata {

namespace {

// y[r] = row r of W · x for r in [r0, r1), dequantized weight rows times f32 activations.
void rows_dot_f32(const Weight& w, const uint8_t* matrix, int64_t r0, int64_t r1, const float* x, float* y) {
    const int64_t n = w.ne[0];
    std::vector<float> row(n);
    for (int64_t r = r0; r < r1; ++r) {
        dequantize_row(w.type, matrix + (size_t)r * w.row_bytes, row.data(), n);
        float acc = 0;
        for (int64_t i = 0; i < n; ++i) acc += row[i] * x[i];
        y[r] = acc;
    }
}

// One expert's share of a pass: the tokens it serves and where their rows live in the flat buffers.
struct Group {
    int expert;
    std::vector<int> pair_index;   // indices into pairs, ascending
    size_t first;                  // index of this group's first (token) row in the flat per-token buffers
};

// Runs fn(group, r0, r1) over rows [0, rows) of every group, the groups' rows laid end to end and split evenly.
template <typename Fn>
void for_group_rows(ThreadPool& pool, const std::vector<Group>& groups, int64_t rows, const Fn& fn) {
    const int64_t total = rows * (int64_t)groups.size();
    const int64_t pieces = std::min<int64_t>(pool.size(), std::max<int64_t>(1, total / 16));
    pool.parallel_for(pieces, [&](int64_t p0, int64_t p1) {
        const int64_t q0 = total * p0 / pieces, q1 = total * p1 / pieces;
        for (int64_t gi = q0 / rows; gi < (int64_t)groups.size() && gi * rows < q1; ++gi) {
            const int64_t r0 = std::max<int64_t>(q0 - gi * rows, 0), r1 = std::min<int64_t>(q1 - gi * rows, rows);
            if (r0 < r1) fn(groups[gi], r0, r1);
        }
    });
}

}  // namespace

void compute_experts_cpu(ThreadPool& pool, bool f32, const Weight& gate, const Weight& up, const Weight& down,
                         const float* x, const std::vector<ExpertPair>& pairs, float* out) {
    if (pairs.empty()) return;
    const int64_t H = gate.ne[0], I = gate.ne[1], E = gate.ne[2];
    STRATA_CHECK(up.ne[0] == H && up.ne[1] == I && down.ne[0] == I && down.ne[1] == H, "experts: tensor shapes ",
                 H, "x", I, " / ", up.ne[0], "x", up.ne[1], " / ", down.ne[0], "x", down.ne[1], " do not match");
    std::vector<std::vector<int>> users(E);
    for (size_t i = 0; i < pairs.size(); ++i) {
        STRATA_CHECK(pairs[i].expert >= 0 && pairs[i].expert < E, "experts: expert id ", pairs[i].expert,
                     " is outside 0..", E - 1);
        users[pairs[i].expert].push_back((int)i);
    }
    std::vector<Group> groups;
    size_t n_rows = 0;
    for (int64_t e = 0; e < E; ++e)
        if (!users[e].empty()) {
            groups.push_back({(int)e, std::move(users[e]), n_rows});
            n_rows += groups.back().pair_index.size();
        }

    // Activations: one row per (expert, token) pair, in group order.
    const size_t ab_g = (act_bytes(gate.type, H) + 63) / 64 * 64;
    const size_t ab_u = (act_bytes(up.type, H) + 63) / 64 * 64;
    const size_t ab_d = (act_bytes(down.type, I) + 63) / 64 * 64;
    // gate and up read the same quantized rows when they share a format; each token is quantized once per
    // format and copied to its pairs' rows (a decode token's 10 pairs, a prompt token's k pairs).
    const bool same_act = gate.type == up.type;
    std::vector<uint8_t> act_g, act_u, act_h;
    if (!f32) {
        int n_tokens = 0;
        for (const ExpertPair& pr : pairs) n_tokens = std::max(n_tokens, pr.token + 1);
        std::vector<uint8_t> tok_g(ab_g * n_tokens), tok_u(same_act ? 0 : ab_u * n_tokens);
        std::vector<char> quantized(n_tokens, 0);
        act_g.resize(ab_g * n_rows);
        if (!same_act) act_u.resize(ab_u * n_rows);
        act_h.resize(ab_d * n_rows);
        for (const Group& g : groups)
            for (size_t i = 0; i < g.pair_index.size(); ++i) {
                const int t = pairs[g.pair_index[i]].token;
                if (!quantized[t]) {
                    quantize_act(gate.type, x + (size_t)t * H, tok_g.data() + ab_g * t, H);
                    if (!same_act) quantize_act(up.type, x + (size_t)t * H, tok_u.data() + ab_u * t, H);
                    quantized[t] = 1;
                }
                std::memcpy(act_g.data() + ab_g * (g.first + i), tok_g.data() + ab_g * t, ab_g);
                if (!same_act) std::memcpy(act_u.data() + ab_u * (g.first + i), tok_u.data() + ab_u * t, ab_u);
            }
    }
    const uint8_t* act_up = same_act ? act_g.data() : act_u.data();
    std::vector<float> gv(n_rows * I), uv(n_rows * I), hv(n_rows * I), ov(n_rows * H);

    for_group_rows(pool, groups, I, [&](const Group& g, int64_t r0, int64_t r1) {
        const int n = (int)g.pair_index.size();
        const uint8_t* wg = gate.matrix(g.expert);
        const uint8_t* wu = up.matrix(g.expert);
        if (f32) {
            for (int i = 0; i < n; ++i) {
                const float* xt = x + (size_t)pairs[g.pair_index[i]].token * H;
                rows_dot_f32(gate, wg, r0, r1, xt, gv.data() + (g.first + i) * I);
                rows_dot_f32(up, wu, r0, r1, xt, uv.data() + (g.first + i) * I);
            }
            return;
        }
        gemv_rows_multi(gate.type, H, wg, gate.row_bytes, r0, r1, act_g.data() + ab_g * g.first, n, ab_g,
                        gv.data() + g.first * I, I);
        gemv_rows_multi(up.type, H, wu, up.row_bytes, r0, r1, act_up + ab_u * g.first, n, ab_u,
                        uv.data() + g.first * I, I);
    });
    for (size_t i = 0; i < n_rows * I; ++i) hv[i] = gv[i] / (1.0f + std::exp(-gv[i])) * uv[i];   // silu(gate) ⊙ up
    if (!f32)
        for (size_t r = 0; r < n_rows; ++r) quantize_act(down.type, hv.data() + r * I, act_h.data() + ab_d * r, I);

    for_group_rows(pool, groups, H, [&](const Group& g, int64_t r0, int64_t r1) {
        const int n = (int)g.pair_index.size();
        const uint8_t* wd = down.matrix(g.expert);
        if (f32) {
            for (int i = 0; i < n; ++i)
                rows_dot_f32(down, wd, r0, r1, hv.data() + (g.first + i) * I, ov.data() + (g.first + i) * H);
            return;
        }
        gemv_rows_multi(down.type, I, wd, down.row_bytes, r0, r1, act_h.data() + ab_d * g.first, n, ab_d,
                        ov.data() + g.first * H, H);
    });
    for (const Group& g : groups)
        for (size_t i = 0; i < g.pair_index.size(); ++i)
            std::memcpy(out + (size_t)g.pair_index[i] * H, ov.data() + (g.first + i) * H, (size_t)H * sizeof(float));
}

}  // namespace strata
