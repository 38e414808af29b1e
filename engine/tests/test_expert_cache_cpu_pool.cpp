// CpuExpertPool (the CPU half of the hybrid MoE path) against CpuBackend::moe_experts (combined outputs) and against a
// one-pair-at-a-time reference built from quantize_act + vec_dot (every pair's output row), bit for bit, with Q8 and
// f32 activations, Q8_0 / Q2_0 / mixed formats, any worker count; plus ThreadPool and SpinBarrier semantics.
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "check.h"
#include "experts/cpu_expert_pool.h"
#include "quant/quant.h"

using namespace strata;

namespace {

// A 3-D Q8_0 expert tensor {n, rows, E} with random blocks.
struct Q8Tensor {
    std::vector<uint8_t> bytes;
    Weight w;
    Q8Tensor(int n, int rows, int E, std::mt19937& rng) {
        const size_t row_bytes = (size_t)n / 32 * 34;
        bytes.resize(row_bytes * rows * E);
        std::uniform_int_distribution<int> q(-127, 127);
        std::uniform_real_distribution<float> d(0.001f, 0.02f);
        for (size_t b = 0; b < bytes.size() / 34; ++b) {
            const uint16_t h = f32_to_fp16(d(rng));
            std::memcpy(&bytes[b * 34], &h, 2);
            for (int i = 0; i < 32; ++i) bytes[b * 34 + 2 + i] = (uint8_t)(int8_t)q(rng);
        }
        w.type = GgmlType::Q8_0;
        w.ne[0] = n;
        w.ne[1] = rows;
        w.ne[2] = E;
        w.data = bytes.data();
        w.row_bytes = row_bytes;
    }
};

// A 3-D Q2_0 expert tensor {n, rows, E} with random codes and a random-signed scale per block.
struct Q2Tensor {
    std::vector<uint8_t> bytes;
    Weight w;
    Q2Tensor(int n, int rows, int E, std::mt19937& rng) {
        const size_t row_bytes = (size_t)n / 64 * 18;
        bytes.resize(row_bytes * rows * E);
        std::uniform_int_distribution<int> byte(0, 255);
        std::uniform_real_distribution<float> d(0.002f, 0.03f);
        for (size_t b = 0; b < bytes.size() / 18; ++b) {
            const uint16_t h = f32_to_fp16(byte(rng) & 1 ? d(rng) : -d(rng));
            std::memcpy(&bytes[b * 18], &h, 2);
            for (int i = 0; i < 16; ++i) bytes[b * 18 + 2 + i] = (uint8_t)byte(rng);
        }
        w.type = GgmlType::Q2_0;
        w.ne[0] = n;
        w.ne[1] = rows;
        w.ne[2] = E;
        w.data = bytes.data();
        w.row_bytes = row_bytes;
    }
};

// Row r of W · x the way the pool's f32 mode defines it: dequantized row, products summed in order.
float dot_f32(const Weight& w, const uint8_t* row, const float* x) {
    std::vector<float> deq(w.ne[0]);
    dequantize_row(w.type, row, deq.data(), w.ne[0]);
    float acc = 0;
    for (int64_t i = 0; i < w.ne[0]; ++i) acc += deq[i] * x[i];
    return acc;
}

// One pair computed alone: down_e(silu(gate_e · x) ⊙ (up_e · x)) with one vec_dot per row.
std::vector<float> reference_pair(const Weight& gate, const Weight& up, const Weight& down, const float* x, int e,
                                  bool f32_act) {
    const int64_t H = gate.ne[0], I = gate.ne[1];
    std::vector<uint8_t> ag(act_bytes(gate.type, H)), au(act_bytes(up.type, H)), ah(act_bytes(down.type, I));
    if (!f32_act) {
        quantize_act(gate.type, x, ag.data(), H);
        quantize_act(up.type, x, au.data(), H);
    }
    std::vector<float> h(I), out(H);
    for (int64_t r = 0; r < I; ++r) {
        const uint8_t* wg = gate.matrix(e) + r * gate.row_bytes;
        const uint8_t* wu = up.matrix(e) + r * up.row_bytes;
        const float g = f32_act ? dot_f32(gate, wg, x) : vec_dot(gate.type, H, wg, ag.data());
        const float u = f32_act ? dot_f32(up, wu, x) : vec_dot(up.type, H, wu, au.data());
        h[r] = g / (1.0f + std::exp(-g)) * u;
    }
    if (!f32_act) quantize_act(down.type, h.data(), ah.data(), I);
    for (int64_t c = 0; c < H; ++c) {
        const uint8_t* wd = down.matrix(e) + c * down.row_bytes;
        out[c] = f32_act ? dot_f32(down, wd, h.data()) : vec_dot(down.type, I, wd, ah.data());
    }
    return out;
}

// Every pair's output row from the pool equals reference_pair's, for pair lists of the decode shape (one token,
// fewer pairs than workers) and of prompts (experts shared by several tokens, listed out of order).
void check_against_reference(const char* name, const Weight& gate, const Weight& up, const Weight& down,
                             bool f32_act, int workers) {
    const int H = (int)gate.ne[0], E = (int)gate.ne[2], T = 6;
    std::mt19937 rng(100 + workers);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x((size_t)T * H);
    for (float& v : x) v = nd(rng);
    std::vector<std::vector<ExpertPair>> lists = {
        {{0, 3}},
        {{0, 5}, {0, 1}, {0, 4}, {0, 2}},
        {{0, 1}, {1, 1}, {2, 0}, {3, 1}, {4, 5}, {5, 2}, {1, 0}, {2, 5}, {5, 1}, {0, E - 1}, {3, E - 1}},
    };
    CpuExpertPool pool(workers, f32_act);
    for (size_t li = 0; li < lists.size(); ++li) {
        const std::vector<ExpertPair>& pairs = lists[li];
        std::vector<float> out(pairs.size() * H, NAN);
        pool.compute(gate, up, down, x.data(), pairs, out.data());
        int mismatches = 0;
        for (size_t p = 0; p < pairs.size(); ++p) {
            const std::vector<float> ref = reference_pair(gate, up, down, x.data() + (size_t)pairs[p].token * H,
                                                          pairs[p].expert, f32_act);
            for (int c = 0; c < H; ++c) mismatches += std::memcmp(&ref[c], &out[p * H + c], sizeof(float)) != 0;
        }
        CHECK_MSG(mismatches == 0, "%s, f32_act %d, %d workers, pair list %zu: %d of %zu outputs differ from the "
                  "one-pair reference", name, (int)f32_act, workers, li, mismatches, pairs.size() * H);
    }
}

void check_thread_pool() {
    for (int threads : {1, 2, 3, 5})
        for (int64_t n : {1, 2, 3, 7, 100}) {
            ThreadPool pool(threads);
            std::vector<std::atomic<int>> seen(n);
            pool.parallel_for(n, [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i) seen[i].fetch_add(1);
            });
            int wrong = 0;
            for (auto& v : seen) wrong += v.load() != 1;
            CHECK_MSG(wrong == 0, "parallel_for(%lld) on %d threads: %d indices not run exactly once", (long long)n,
                      threads, wrong);
        }
    // A barrier phase ends only when every thread has arrived: each thread sees all increments of the phase.
    for (int threads : {1, 2, 4}) {
        ThreadPool pool(threads);
        SpinBarrier barrier(threads);
        std::atomic<int> count{0}, errors{0};
        const int phases = 200;
        pool.parallel_for(threads, [&](int64_t, int64_t) {
            for (int ph = 0; ph < phases; ++ph) {
                count.fetch_add(1);
                barrier.arrive_and_wait();
                if (count.load() != threads * (ph + 1)) errors.fetch_add(1);
                barrier.arrive_and_wait();
            }
        });
        CHECK_MSG(errors.load() == 0, "SpinBarrier(%d): %d phases saw a count of another phase", threads,
                  errors.load());
    }
}

void check_mode(bool f32_act, int workers) {
    const int H = 64, I = 96, E = 6, T = 5, k = 3;
    std::mt19937 rng(7 + workers);
    Q8Tensor gate(H, I, E, rng), up(H, I, E, rng), down(I, H, E, rng);
    MoeWeights mw;
    mw.gate_exps = gate.w;
    mw.up_exps = up.w;
    mw.down_exps = down.w;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x((size_t)T * H);
    for (float& v : x) v = nd(rng);
    std::vector<int32_t> ids((size_t)T * k);
    std::vector<float> wts((size_t)T * k);
    for (int t = 0; t < T; ++t)
        for (int j = 0; j < k; ++j) {
            ids[t * k + j] = (t * 2 + j * 3) % E;   // distinct per token, experts shared between tokens
            wts[t * k + j] = 0.2f + 0.1f * j + 0.01f * t;
        }
    CpuBackend cpu(2, false, f32_act);
    std::vector<float> ref((size_t)T * H);
    cpu.moe_experts(mw, x.data(), T, k, ids.data(), wts.data(), ref.data());

    // Pairs computed in two groups (every other pair), as a cache split would, then combined in slot order.
    CpuExpertPool pool(workers, f32_act);
    std::vector<ExpertPair> even, odd;
    for (int p = 0; p < T * k; ++p) (p % 2 ? odd : even).push_back(ExpertPair{p / k, ids[p]});
    std::vector<float> out_even(even.size() * H), out_odd(odd.size() * H);
    pool.compute(gate.w, up.w, down.w, x.data(), even, out_even.data());
    pool.compute(gate.w, up.w, down.w, x.data(), odd, out_odd.data());
    CHECK(pool.pairs_done() == T * k);
    int mismatches = 0;
    for (int t = 0; t < T; ++t)
        for (int c = 0; c < H; ++c) {
            float acc = 0;
            for (int j = 0; j < k; ++j) {
                const int p = t * k + j;
                const float* row = p % 2 ? &out_odd[(size_t)(p / 2) * H] : &out_even[(size_t)(p / 2) * H];
                acc += wts[p] * row[c];
            }
            mismatches += acc != ref[(size_t)t * H + c];
        }
    CHECK_MSG(mismatches == 0, "f32_act %d, %d workers: %d of %d outputs differ", (int)f32_act, workers, mismatches,
              T * H);
    float mx = 0;
    for (float v : ref) mx = std::max(mx, std::abs(v));
    CHECK(mx > 0);   // the comparison saw real values
}

}  // namespace

int main() {
    // The chunked, prefetching row loop (read once, at the first call) with a distance shorter than a share.
#ifdef _WIN32
    _putenv_s("STRATA_CPU_PREFETCH_KB", "1");
#else
    setenv("STRATA_CPU_PREFETCH_KB", "1", 1);
#endif
    check_thread_pool();
    for (bool f32_act : {false, true})
        for (int workers : {1, 3}) check_mode(f32_act, workers);
    // H 256, I 192: several 16-row shares per expert; Q2_0 rows of 4 / 3 blocks.
    std::mt19937 rng(3);
    const int H = 256, I = 192, E = 7;
    Q2Tensor g2(H, I, E, rng), u2(H, I, E, rng), d2(I, H, E, rng);
    Q8Tensor u8(H, I, E, rng);
    for (int workers : {1, 2, 3, 6, 7}) {
        check_against_reference("Q2_0", g2.w, u2.w, d2.w, false, workers);
        check_against_reference("Q2_0 gate, Q8_0 up", g2.w, u8.w, d2.w, false, workers);
    }
    for (int workers : {1, 3}) check_against_reference("Q2_0", g2.w, u2.w, d2.w, true, workers);
    return test::exit_code();
}
