// compute_experts_cpu: the routed experts of one MoE layer on the CPU pool (see moe_cpu.h for the phases).
#include "backend/cpu/moe_cpu.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define STRATA_PREFETCH_L2(p) _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1)
#else
#define STRATA_PREFETCH_L2(p) ((void)(p))
#endif

#include "common/error.h"
#include "quant/quant.h"

namespace strata {

namespace {

// Software L2 prefetch on top of the kernels' own (which runs 4 rows ahead: ~3 KB for 720-byte Q2_0 rows of 2560,
// 720 bytes for rows of 640). None by default: on the H200 host a 12 GB PC stand-in decoded 93.06 / 92.61 tok/s
// without it against 90.28 / 91.34 with 16 KB at the start of each share (4,4 and 64,64 KB: slower still;
// bench/results/2026-12-03-h200, r18). For A/B runs, STRATA_CPU_PREFETCH_KB=S[,A] sets the distances in KB (A = S if
// absent; 0 = none).
struct PrefetchDistances {
    size_t start;   // the first bytes of a thread's share, fetched while it quantizes its inputs
    size_t ahead;   // within a share, how far ahead of the rows being computed
};

const PrefetchDistances& prefetch_distances() {
    static const PrefetchDistances d = [] {
        const char* v = std::getenv("STRATA_CPU_PREFETCH_KB");
        if (!v) return PrefetchDistances{0, 0};
        char* rest = nullptr;
        const size_t start = (size_t)std::strtoul(v, &rest, 10) * 1024;
        const size_t ahead = *rest == ',' ? (size_t)std::strtoul(rest + 1, nullptr, 10) * 1024 : start;
        return PrefetchDistances{start, ahead};
    }();
    return d;
}

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

// Thread t's share [begin, end) of `total` items, cut at multiples of 16 (one cache line of floats) so no two
// threads write the same line of an output row.
void share_of(int64_t total, int t, int n, int64_t& begin, int64_t& end) {
    const int64_t lines = (total + 15) / 16;
    begin = std::min(total, lines * t / n * 16);
    end = t + 1 == n ? total : std::min(total, lines * (t + 1) / n * 16);
}

// The experts of a call laid out as groups: group g serves pairs order[first[g] .. first[g+1]), all of one expert.
struct Groups {
    const std::vector<ExpertPair>& pairs;
    const std::vector<int>& order;
    const std::vector<int>& first;
    int count() const { return (int)first.size() - 1; }
    int expert(int g) const { return pairs[order[first[g]]].expert; }
    int size(int g) const { return first[g + 1] - first[g]; }
};

// fn(g, r0, r1) for thread t's share of rows [0, rows) of every group, the groups' rows laid end to end.
template <typename Fn>
void for_group_rows(const Groups& groups, int64_t rows, int t, int n, const Fn& fn) {
    int64_t q0, q1;
    share_of(rows * groups.count(), t, n, q0, q1);
    for (int64_t g = q0 / rows; g < groups.count() && g * rows < q1; ++g) {
        const int64_t r0 = std::max<int64_t>(q0 - g * rows, 0), r1 = std::min<int64_t>(q1 - g * rows, rows);
        if (r0 < r1) fn((int)g, r0, r1);
    }
}

// gemv_rows_multi over rows [r0, r1) of one matrix in ~4 KB chunks, each preceded by an L2 prefetch of the chunk
// prefetch_distances().ahead further on (within [r0, r1)). Same kernel per row, so the same bits.
void gemv_rows_ahead(const Weight& w, const uint8_t* matrix, int64_t r0, int64_t r1, const uint8_t* acts, int n_act,
                     size_t act_stride, float* y, size_t y_stride) {
    const size_t ahead = prefetch_distances().ahead;
    if (ahead == 0) {
        gemv_rows_multi(w.type, w.ne[0], matrix, w.row_bytes, r0, r1, acts, n_act, act_stride, y, y_stride);
        return;
    }
    const uint8_t* end = matrix + (size_t)r1 * w.row_bytes;
    const uint8_t* next = matrix + (size_t)r0 * w.row_bytes;   // first byte not yet prefetched
    const int64_t chunk = std::max<int64_t>(1, (int64_t)(4096 / w.row_bytes));
    for (int64_t c0 = r0; c0 < r1; c0 += chunk) {
        const int64_t c1 = std::min(r1, c0 + chunk);
        const uint8_t* until = std::min(end, matrix + (size_t)c1 * w.row_bytes + ahead);
        for (; next < until; next += 64) STRATA_PREFETCH_L2(next);
        gemv_rows_multi(w.type, w.ne[0], matrix, w.row_bytes, c0, c1, acts, n_act, act_stride, y, y_stride);
    }
}

// Thread t's share [begin, end) of `total` items (tokens, pair rows), as even as whole items allow.
void even_share(int64_t total, int t, int n, int64_t& begin, int64_t& end) {
    begin = total * t / n;
    end = total * (t + 1) / n;
}

// L2 prefetch of the first prefetch_distances().start bytes of thread t's share of rows [0, rows) of each matrix in
// ws, issued before the thread quantizes the phase's inputs, so the fetch overlaps that work.
void prefetch_share_start(const Groups& groups, std::initializer_list<const Weight*> ws, int64_t rows, int t, int n) {
    for (const Weight* w : ws) {
        size_t budget = prefetch_distances().start;
        for_group_rows(groups, rows, t, n, [&](int g, int64_t r0, int64_t r1) {
            const uint8_t* p = w->matrix(groups.expert(g)) + (size_t)r0 * w->row_bytes;
            const size_t bytes = std::min(budget, (size_t)(r1 - r0) * w->row_bytes);
            for (size_t off = 0; off < bytes; off += 64) STRATA_PREFETCH_L2(p + off);
            budget -= bytes;
        });
    }
}

size_t padded_act_bytes(GgmlType t, int64_t n) { return (act_bytes(t, n) + 63) / 64 * 64; }

template <typename T>
T* at_least(std::vector<T>& v, size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
}

}  // namespace

void compute_experts_cpu(ThreadPool& pool, bool f32, const Weight& gate, const Weight& up, const Weight& down,
                         const float* x, const std::vector<ExpertPair>& pairs, float* out) {
    MoeScratch scratch;
    compute_experts_cpu(pool, f32, gate, up, down, x, pairs, out, scratch);
}

void compute_experts_cpu(ThreadPool& pool, bool f32, const Weight& gate, const Weight& up, const Weight& down,
                         const float* x, const std::vector<ExpertPair>& pairs, float* out, MoeScratch& s) {
    if (pairs.empty()) return;
    const int64_t H = gate.ne[0], I = gate.ne[1], E = gate.ne[2];
    STRATA_CHECK(up.ne[0] == H && up.ne[1] == I && down.ne[0] == I && down.ne[1] == H, "experts: tensor shapes ",
                 H, "x", I, " / ", up.ne[0], "x", up.ne[1], " / ", down.ne[0], "x", down.ne[1], " do not match");
    // Checked here, not in the threads: an exception inside the pool would leave the others at a barrier.
    for (const Weight* w : {&gate, &up, &down}) {
        const int blk = ggml_type_info(w->type).block_elems;
        STRATA_CHECK(quant_supported(w->type) && w->ne[0] % blk == 0, "experts: rows of ", w->ne[0], " ",
                     ggml_type_name(w->type), " weights are not whole blocks of ", blk);
    }
    const size_t n_rows = pairs.size();   // one row per (expert, token) pair, in group order
    s.order.resize(n_rows);
    for (size_t i = 0; i < n_rows; ++i) {
        STRATA_CHECK(pairs[i].expert >= 0 && pairs[i].expert < E, "experts: expert id ", pairs[i].expert,
                     " is outside 0..", E - 1);
        STRATA_CHECK(pairs[i].token >= 0, "experts: token index ", pairs[i].token, " of pair ", i, " is negative");
        s.order[i] = (int)i;
    }
    std::sort(s.order.begin(), s.order.end(), [&](int a, int b) {
        return pairs[a].expert != pairs[b].expert ? pairs[a].expert < pairs[b].expert : a < b;
    });
    s.group_first.clear();
    for (size_t j = 0; j < n_rows; ++j)
        if (j == 0 || pairs[s.order[j]].expert != pairs[s.order[j - 1]].expert) s.group_first.push_back((int)j);
    s.group_first.push_back((int)n_rows);
    const Groups groups{pairs, s.order, s.group_first};

    const size_t ab_g = padded_act_bytes(gate.type, H), ab_u = padded_act_bytes(up.type, H);
    const size_t ab_d = padded_act_bytes(down.type, I);
    const bool same_act = gate.type == up.type;   // gate and up then read the same quantized rows
    int n_tokens = 0;
    for (const ExpertPair& pr : pairs) n_tokens = std::max(n_tokens, pr.token + 1);
    s.token_used.assign(n_tokens, 0);
    for (const ExpertPair& pr : pairs) s.token_used[pr.token] = 1;
    // One token (decode): every thread quantizes it for itself, no barrier. Several: each token once, split over
    // the threads, then a barrier.
    const bool shared_tokens = !f32 && n_tokens > 1;
    uint8_t* tok_g = shared_tokens ? at_least(s.tok_g, ab_g * n_tokens) : nullptr;
    uint8_t* tok_u = same_act ? tok_g : shared_tokens ? at_least(s.tok_u, ab_u * n_tokens) : nullptr;
    float* gv = at_least(s.gv, n_rows * I);   // gate rows, then silu(gate) ⊙ up in place
    float* uv = at_least(s.uv, n_rows * I);
    float* ov = at_least(s.ov, n_rows * H);   // down rows of groups that serve several tokens

    const int n = pool.size();
    if ((int)s.per_thread.size() < n) s.per_thread.resize(n);
    SpinBarrier barrier(n);
    pool.parallel_for(n, [&](int64_t t64, int64_t) {
        const int t = (int)t64;
        MoeScratch::ThreadBuffers& own = s.per_thread[t];
        auto mark = std::chrono::steady_clock::now();
        const auto end_phase = [&](int phase) {   // the calling thread (t = 0) times the phases
            if (t != 0) return;
            const auto now = std::chrono::steady_clock::now();
            s.phase_seconds[phase] += std::chrono::duration<double>(now - mark).count();
            mark = now;
        };
        // 1. Quantized inputs; the first weight rows of this thread's share are fetched meanwhile.
        if (!f32) prefetch_share_start(groups, {&gate, &up}, I, t, n);
        uint8_t* own_g = nullptr;
        uint8_t* own_u = nullptr;
        if (!f32 && !shared_tokens) {
            own_g = at_least(own.x_act, ab_g + (same_act ? 0 : ab_u));
            own_u = same_act ? own_g : own_g + ab_g;
            quantize_act(gate.type, x, own_g, H);
            if (!same_act) quantize_act(up.type, x, own_u, H);
        } else if (shared_tokens) {
            int64_t k0, k1;
            even_share(n_tokens, t, n, k0, k1);
            for (int64_t tok = k0; tok < k1; ++tok) {
                if (!s.token_used[tok]) continue;
                quantize_act(gate.type, x + (size_t)tok * H, tok_g + ab_g * tok, H);
                if (!same_act) quantize_act(up.type, x + (size_t)tok * H, tok_u + ab_u * tok, H);
            }
            barrier.arrive_and_wait();
        }
        end_phase(0);
        // 2. This thread's share of all gate and up rows, then silu(gate) ⊙ up on those rows.
        for_group_rows(groups, I, t, n, [&](int g, int64_t r0, int64_t r1) {
            const int first = groups.first[g], count = groups.size(g);
            const uint8_t* wg = gate.matrix(groups.expert(g));
            const uint8_t* wu = up.matrix(groups.expert(g));
            if (f32) {
                for (int i = 0; i < count; ++i) {
                    const float* xt = x + (size_t)pairs[s.order[first + i]].token * H;
                    rows_dot_f32(gate, wg, r0, r1, xt, gv + (size_t)(first + i) * I);
                    rows_dot_f32(up, wu, r0, r1, xt, uv + (size_t)(first + i) * I);
                }
            } else {
                // The quantized rows of the group's tokens at a fixed stride: the thread's own copy of the only token,
                // a shared token row, or several shared rows gathered.
                const uint8_t* ag = own_g;
                const uint8_t* au = own_u;
                if (shared_tokens && count == 1) {
                    ag = tok_g + ab_g * pairs[s.order[first]].token;
                    au = tok_u + ab_u * pairs[s.order[first]].token;
                } else if (shared_tokens) {
                    uint8_t* buf = at_least(own.gather, (ab_g + (same_act ? 0 : ab_u)) * count);
                    for (int i = 0; i < count; ++i) {
                        const int tok = pairs[s.order[first + i]].token;
                        std::memcpy(buf + ab_g * i, tok_g + ab_g * tok, ab_g);
                        if (!same_act) std::memcpy(buf + ab_g * count + ab_u * i, tok_u + ab_u * tok, ab_u);
                    }
                    ag = buf;
                    au = same_act ? buf : buf + ab_g * count;
                }
                gemv_rows_ahead(gate, wg, r0, r1, ag, count, ab_g, gv + (size_t)first * I, I);
                gemv_rows_ahead(up, wu, r0, r1, au, count, ab_u, uv + (size_t)first * I, I);
            }
            for (int i = 0; i < count; ++i) {
                float* g_row = gv + (size_t)(first + i) * I;
                const float* u_row = uv + (size_t)(first + i) * I;
                for (int64_t r = r0; r < r1; ++r) g_row[r] = g_row[r] / (1.0f + std::exp(-g_row[r])) * u_row[r];
            }
        });
        if (!f32) prefetch_share_start(groups, {&down}, H, t, n);
        barrier.arrive_and_wait();   // every hidden row complete
        end_phase(1);
        // 3. This thread's share of all down rows, each group's hidden rows quantized by the thread itself (a decode
        //    thread quantizes one or two rows instead of waiting for a second barrier); straight into out for a
        //    one-token group.
        for_group_rows(groups, H, t, n, [&](int g, int64_t r0, int64_t r1) {
            const int first = groups.first[g], count = groups.size(g);
            const uint8_t* wd = down.matrix(groups.expert(g));
            float* y = count == 1 ? out + (size_t)s.order[first] * H : ov + (size_t)first * H;
            if (f32) {
                for (int i = 0; i < count; ++i)
                    rows_dot_f32(down, wd, r0, r1, gv + (size_t)(first + i) * I, y + (size_t)i * H);
            } else {
                uint8_t* ah = at_least(own.h_act, ab_d * count);
                for (int i = 0; i < count; ++i) quantize_act(down.type, gv + (size_t)(first + i) * I, ah + ab_d * i, I);
                gemv_rows_ahead(down, wd, r0, r1, ah, count, ab_d, y, H);
            }
            if (count > 1)
                for (int i = 0; i < count; ++i)
                    std::memcpy(out + (size_t)s.order[first + i] * H + r0, y + (size_t)i * H + r0,
                                (size_t)(r1 - r0) * sizeof(float));
        });
        end_phase(2);
    });
}

}  // namespace strata
