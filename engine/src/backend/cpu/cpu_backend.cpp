#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/moe_cpu.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/argmax.h"
#include "common/error.h"
#include "common/log.h"
#include "common/platform.h"
#include "model/weights.h"
#include "model/topk.h"
#include "quant/quant.h"

namespace strata {

namespace {
inline float sigmoidf(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float siluf(float x) { return x / (1.0f + std::exp(-x)); }
inline float softplusf(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
}  // namespace

std::vector<float> weight_to_f32(const Weight& w) {
    int64_t n = w.ne[0] * w.n_rows();
    std::vector<float> out((size_t)n);
    for (int64_t r = 0; r < w.n_rows(); ++r) dequantize_row(w.type, w.row(r), out.data() + r * w.ne[0], w.ne[0]);
    return out;
}

CpuBackend::CpuBackend(int n_threads, bool pin, bool f32_activations)
    : pool_(n_threads, pin), f32_activations_(f32_activations) {
    // STRATA_ISA=scalar|avx2|avx512 limits the kernels (e.g. to stand in for a desktop CPU without AVX-512).
    if (const char* isa = std::getenv("STRATA_ISA")) {
        const std::string v = isa;
        if (v == "scalar") set_active_isa(Isa::scalar);
        else if (v == "avx2") set_active_isa(Isa::avx2);
        else if (v == "avx512") set_active_isa(Isa::avx512);
        else fail("STRATA_ISA must be scalar, avx2 or avx512, got '", v, "'");
        if (v != "avx512") set_avx512_vnni(false);
    }
}

std::vector<uint8_t> CpuBackend::prepare_act(GgmlType type, const float* x, int64_t n) {
    if (f32_activations_) return {};
    std::vector<uint8_t> act(act_bytes(type, n));
    quantize_act(type, x, act.data(), n);
    return act;
}

void CpuBackend::rows_dot(GgmlType type, int64_t n, const uint8_t* w, size_t row_bytes, int64_t r0, int64_t r1,
                          const float* x, const void* act, float* y) {
    if (!f32_activations_) {
        gemv_rows(type, n, w, row_bytes, r0, r1, act, y);
        return;
    }
    std::vector<float> row(n);
    for (int64_t r = r0; r < r1; ++r) {
        dequantize_row(type, w + (size_t)r * row_bytes, row.data(), n);
        float acc = 0;
        for (int64_t i = 0; i < n; ++i) acc += row[i] * x[i];
        y[r] = acc;
    }
}

// Each block starts with a 64-byte header holding its size (the counts of memory_use() without a map or a lock).
constexpr size_t kAllocHeader = 64;

float* CpuBackend::alloc(size_t n) {
    const size_t bytes = std::max<size_t>(64, (n * sizeof(float) + 63) / 64 * 64);
    auto* base = static_cast<uint8_t*>(platform::aligned_alloc_bytes(64, kAllocHeader + bytes));
    STRATA_CHECK(base, "out of memory allocating ", n * sizeof(float), " bytes");
    std::memcpy(base, &bytes, sizeof bytes);
    const int64_t live = alloc_live_.fetch_add((int64_t)bytes, std::memory_order_relaxed) + (int64_t)bytes;
    for (int64_t peak = alloc_peak_.load(std::memory_order_relaxed);
         live > peak && !alloc_peak_.compare_exchange_weak(peak, live, std::memory_order_relaxed);) {
    }
    return reinterpret_cast<float*>(base + kAllocHeader);
}
void CpuBackend::release(float* p) {
    if (!p) return;
    uint8_t* base = reinterpret_cast<uint8_t*>(p) - kAllocHeader;
    size_t bytes;
    std::memcpy(&bytes, base, sizeof bytes);
    alloc_live_.fetch_sub((int64_t)bytes, std::memory_order_relaxed);
    platform::aligned_free(base);
}
Backend::MemoryUse CpuBackend::memory_use() const {
    const int64_t live = alloc_live_.load(std::memory_order_relaxed);
    return {live, alloc_peak_.load(std::memory_order_relaxed), live};
}
void CpuBackend::reset_memory_peak() { alloc_peak_.store(alloc_live_.load(std::memory_order_relaxed)); }
void CpuBackend::to_device(float* dst, const float* host, size_t n) { std::memcpy(dst, host, n * sizeof(float)); }
void CpuBackend::to_host(float* host, const float* src, size_t n) { std::memcpy(host, src, n * sizeof(float)); }
void CpuBackend::fill(float* x, float value, size_t n) { std::fill(x, x + n, value); }
void CpuBackend::copy(float* dst, const float* src, size_t n) { std::memmove(dst, src, n * sizeof(float)); }
void CpuBackend::argmax_rows(const float* x, int rows, int n, int32_t* out) {
    for (int r = 0; r < rows; ++r) out[r] = argmax_first(x + (size_t)r * n, n);
}

void CpuBackend::embed(const Weight& table, const int32_t* ids, int T, float* y) {
    OpProfile::Scope prof(profile_, "embed");
    const int64_t H = table.ne[0];
    for (int t = 0; t < T; ++t) {
        STRATA_CHECK(ids[t] >= 0 && ids[t] < table.ne[1], "token id ", ids[t], " is outside the vocabulary of ", table.ne[1]);
        dequantize_row(table.type, table.row(ids[t]), y + (size_t)t * H, H);
    }
}

void CpuBackend::matmul(const Weight& w, const float* x, int T, float* y) {
    OpProfile::Scope prof(profile_, "matmul", ggml_type_name(w.type), (uint64_t)w.row_bytes * w.n_rows());
    const int64_t in = w.ne[0], out = w.n_rows();
    // Pieces of at least 16 rows keep the per-thread overhead small for tiny matrices.
    const int64_t pieces = std::min<int64_t>(pool_.size(), std::max<int64_t>(1, out / 16));
    if (f32_activations_) {
        pool_.parallel_for(pieces, [&](int64_t p0, int64_t p1) {
            int64_t r0 = out * p0 / pieces, r1 = out * p1 / pieces;
            for (int t = 0; t < T; ++t)
                rows_dot(w.type, in, w.data, w.row_bytes, r0, r1, x + (size_t)t * in, nullptr, y + (size_t)t * out);
        });
        return;
    }
    // Every token's activations, quantized once; each weight row is then read once for all tokens.
    const size_t ab = (act_bytes(w.type, in) + 63) / 64 * 64;
    std::vector<uint8_t> acts(ab * (size_t)T);
    for (int t = 0; t < T; ++t) quantize_act(w.type, x + (size_t)t * in, acts.data() + ab * t, in);
    pool_.parallel_for(pieces, [&](int64_t p0, int64_t p1) {
        int64_t r0 = out * p0 / pieces, r1 = out * p1 / pieces;
        gemv_rows_multi(w.type, in, w.data, w.row_bytes, r0, r1, acts.data(), T, ab, y, out);
    });
}

void CpuBackend::rms_norm(const float* x, const Weight* w, int rows, int width, int group, float eps, float* y) {
    OpProfile::Scope prof(profile_, "rms_norm");
    std::vector<float> wf;
    if (w) wf = weight_to_f32(*w);
    const int w_len = w ? (int)wf.size() : 1;
    for (int r = 0; r < rows; ++r) {
        const float* xr = x + (size_t)r * width;
        float* yr = y + (size_t)r * width;
        for (int g0 = 0; g0 < width; g0 += group) {
            float ss = 0;
            for (int j = 0; j < group; ++j) ss += xr[g0 + j] * xr[g0 + j];
            float scale = 1.0f / std::sqrt(ss / group + eps);
            for (int j = 0; j < group; ++j) yr[g0 + j] = xr[g0 + j] * scale * (w ? wf[(g0 + j) % w_len] : 1.0f);
        }
    }
}

void CpuBackend::l2_norm(const float* x, int rows, int width, int group, float eps, float scale, float* y) {
    for (int r = 0; r < rows; ++r)
        for (int g0 = 0; g0 < width; g0 += group) {
            const float* xg = x + (size_t)r * width + g0;
            float* yg = y + (size_t)r * width + g0;
            float ss = 0;
            for (int j = 0; j < group; ++j) ss += xg[j] * xg[j];
            float s = scale / std::sqrt(ss + eps);
            for (int j = 0; j < group; ++j) yg[j] = xg[j] * s;
        }
}

void CpuBackend::unary(Unary f, const float* x, size_t n, float scale, float* y) {
    OpProfile::Scope prof(profile_, "unary");
    for (size_t i = 0; i < n; ++i) {
        float v = x[i] * scale;
        switch (f) {
            case Unary::silu: y[i] = siluf(v); break;
            case Unary::sigmoid: y[i] = sigmoidf(v); break;
            case Unary::softplus: y[i] = softplusf(v); break;
            case Unary::exp: y[i] = std::exp(v); break;
        }
    }
}

void CpuBackend::mul(const float* a, const float* b, size_t n, float* y) {
    for (size_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

void CpuBackend::add(float* y, const float* x, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

void CpuBackend::scale(float* x, size_t n, float s) {
    for (size_t i = 0; i < n; ++i) x[i] *= s;
}

void CpuBackend::add_row(float* x, int T, int width, const Weight& v) {
    const std::vector<float> vf = weight_to_f32(v);
    STRATA_ASSERT((int)vf.size() == width);
    for (int t = 0; t < T; ++t)
        for (int j = 0; j < width; ++j) x[(size_t)t * width + j] += vf[j];
}

void CpuBackend::mul_row(float* x, int T, int width, const Weight& v) {
    const std::vector<float> vf = weight_to_f32(v);
    STRATA_ASSERT((int)vf.size() == width);
    for (int t = 0; t < T; ++t)
        for (int j = 0; j < width; ++j) x[(size_t)t * width + j] *= vf[j];
}

void CpuBackend::slice_cols(const float* x, int T, int width, int c0, int nc, float* y) {
    for (int t = 0; t < T; ++t) std::memcpy(y + (size_t)t * nc, x + (size_t)t * width + c0, (size_t)nc * sizeof(float));
}

void CpuBackend::concat_cols(const float* a, const float* b, int rows, int wa, int wb, float* y) {
    for (int r = 0; r < rows; ++r) {
        std::memcpy(y + (size_t)r * (wa + wb), a + (size_t)r * wa, (size_t)wa * sizeof(float));
        std::memcpy(y + (size_t)r * (wa + wb) + wa, b + (size_t)r * wb, (size_t)wb * sizeof(float));
    }
}

void CpuBackend::deinterleave(const float* x, int T, int n_heads, int la, int lb, float* a, float* b) {
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < n_heads; ++h) {
            const float* src = x + ((size_t)t * n_heads + h) * (la + lb);
            std::memcpy(a + ((size_t)t * n_heads + h) * la, src, (size_t)la * sizeof(float));
            std::memcpy(b + ((size_t)t * n_heads + h) * lb, src + la, (size_t)lb * sizeof(float));
        }
}

void CpuBackend::mean_rows(const float* x, int rows, int width, float* y) {
    for (int j = 0; j < width; ++j) {
        float acc = 0;
        for (int r = 0; r < rows; ++r) acc += x[(size_t)r * width + j];
        y[j] = acc / (float)rows;
    }
}

void CpuBackend::repeat_streams(const float* e, int T, int n, int H, float* X) {
    for (int t = 0; t < T; ++t)
        for (int s = 0; s < n; ++s) std::memcpy(X + ((size_t)t * n + s) * H, e + (size_t)t * H, (size_t)H * sizeof(float));
}

void CpuBackend::ple_gate(const float* K, const float* Q, const float* v, int T, int n, int H, float* gv) {
    const float inv_sqrt_h = 1.0f / std::sqrt((float)H);
    for (int t = 0; t < T; ++t)
        for (int s = 0; s < n; ++s) {
            const float* ks = K + ((size_t)t * n + s) * H;
            const float* qs = Q + ((size_t)t * n + s) * H;
            float d = 0;
            for (int j = 0; j < H; ++j) d += ks[j] * qs[j];
            d *= inv_sqrt_h;
            const float sign = d > 0 ? 1.0f : (d < 0 ? -1.0f : 0.0f);
            const float gamma = sign * std::sqrt(std::max(std::fabs(d), 1e-6f));
            const float g = sigmoidf(gamma);
            float* out = gv + ((size_t)t * n + s) * H;
            for (int j = 0; j < H; ++j) out[j] = g * v[(size_t)t * H + j];
        }
}

void CpuBackend::hyper_mix(const float* xn, const float* m, int T, int n, int H, float* u) {
    OpProfile::Scope prof(profile_, "hyper_mix");
    for (int t = 0; t < T; ++t)
        for (int j = 0; j < H; ++j) {
            float acc = 0;
            for (int s = 0; s < n; ++s) {
                size_t i = (size_t)t * n * H + (size_t)s * H + j;
                acc += m[i] * xn[i];
            }
            u[(size_t)t * H + j] = acc / (float)n;
        }
}

void CpuBackend::hyper_inject(float* X, const float* inj, const float* y, int T, int n, int H) {
    for (int t = 0; t < T; ++t)
        for (int s = 0; s < n; ++s) {
            float g = inj[t * n + s];
            float* xs = X + (size_t)t * n * H + (size_t)s * H;
            const float* yt = y + (size_t)t * H;
            for (int j = 0; j < H; ++j) xs[j] += g * yt[j];
        }
}

void CpuBackend::causal_conv(const float* x, int T, int C, const Weight& w, int K, int dil, float* hist, float* y) {
    OpProfile::Scope prof(profile_, "causal_conv");
    const std::vector<float> wf = weight_to_f32(w);   // [C, K]
    const int H = (K - 1) * dil;                      // history rows
    // Timeline = history rows then the T new rows.
    std::vector<float> line((size_t)(H + T) * C);
    std::memcpy(line.data(), hist, (size_t)H * C * sizeof(float));
    std::memcpy(line.data() + (size_t)H * C, x, (size_t)T * C * sizeof(float));
    for (int t = 0; t < T; ++t)
        for (int c = 0; c < C; ++c) {
            float acc = 0;
            for (int j = 0; j < K; ++j) acc += wf[(size_t)c * K + j] * line[(size_t)(H + t - (K - 1 - j) * dil) * C + c];
            y[(size_t)t * C + c] = acc;
        }
    std::memcpy(hist, line.data() + (size_t)T * C, (size_t)H * C * sizeof(float));
}

void CpuBackend::gdn_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta,
                               int T, int nk, int nv, int dk, int dv, float* S, float* o) {
    OpProfile::Scope prof(profile_, "gdn_recurrent");
    pool_.parallel_for(nv, [&](int64_t h0, int64_t h1) {
        std::vector<float> kv(dv);
        for (int64_t h = h0; h < h1; ++h) {
            const int kh = (int)(h % nk);
            float* Sh = S + (size_t)h * dk * dv;
            for (int t = 0; t < T; ++t) {
                const float* qt = q + (size_t)t * nk * dk + (size_t)kh * dk;
                const float* kt = k + (size_t)t * nk * dk + (size_t)kh * dk;
                const float* vt = v + (size_t)t * nv * dv + (size_t)h * dv;
                const float decay = std::exp(g[(size_t)t * nv + h]);
                const float b = beta[(size_t)t * nv + h];
                for (size_t i = 0; i < (size_t)dk * dv; ++i) Sh[i] *= decay;
                std::fill(kv.begin(), kv.end(), 0.0f);
                for (int i = 0; i < dk; ++i)
                    for (int j = 0; j < dv; ++j) kv[j] += Sh[(size_t)i * dv + j] * kt[i];
                for (int j = 0; j < dv; ++j) kv[j] = b * (vt[j] - kv[j]);   // δ
                for (int i = 0; i < dk; ++i)
                    for (int j = 0; j < dv; ++j) Sh[(size_t)i * dv + j] += kt[i] * kv[j];
                float* ot = o + (size_t)t * nv * dv + (size_t)h * dv;
                std::fill(ot, ot + dv, 0.0f);
                for (int i = 0; i < dk; ++i)
                    for (int j = 0; j < dv; ++j) ot[j] += Sh[(size_t)i * dv + j] * qt[i];
            }
        }
    });
}

void CpuBackend::rope(float* x, int T, int n_heads, int hd, int n_rot, float theta, const int32_t* pos) {
    const int half = n_rot / 2;
    std::vector<float> inv_freq(half);
    for (int j = 0; j < half; ++j) inv_freq[j] = (float)(1.0 / std::pow((double)theta, (double)(2 * j) / n_rot));
    for (int t = 0; t < T; ++t)
        for (int j = 0; j < half; ++j) {
            const float angle = (float)pos[t] * inv_freq[j];
            const float c = std::cos(angle), s = std::sin(angle);
            for (int h = 0; h < n_heads; ++h) {
                float* xh = x + (size_t)t * n_heads * hd + (size_t)h * hd;
                const float a = xh[j], b = xh[j + half];
                xh[j] = a * c - b * s;
                xh[j + half] = b * c + a * s;
            }
        }
}

void CpuBackend::rope_multi(float* x, int T, int n_heads, int hd, int n_rot, float theta, const int32_t* pos3,
                            int sec_h, int sec_w) {
    // rope's arithmetic, with the position of each frequency read from its axis row.
    const int half = n_rot / 2;
    std::vector<float> inv_freq(half);
    std::vector<int> axis(half);
    for (int j = 0; j < half; ++j) {
        inv_freq[j] = (float)(1.0 / std::pow((double)theta, (double)(2 * j) / n_rot));
        axis[j] = (j % 3 == 1 && j < 3 * sec_h) ? 1 : (j % 3 == 2 && j < 3 * sec_w) ? 2 : 0;
    }
    for (int t = 0; t < T; ++t)
        for (int j = 0; j < half; ++j) {
            const float angle = (float)pos3[(size_t)axis[j] * T + t] * inv_freq[j];
            const float c = std::cos(angle), s = std::sin(angle);
            for (int h = 0; h < n_heads; ++h) {
                float* xh = x + (size_t)t * n_heads * hd + (size_t)h * hd;
                const float a = xh[j], b = xh[j + half];
                xh[j] = a * c - b * s;
                xh[j + half] = b * c + a * s;
            }
        }
}

void CpuBackend::scatter_rows(float* dst, const float* src, int T, int width, const int32_t* pos) {
    for (int t = 0; t < T; ++t)
        std::memmove(dst + (size_t)pos[t] * width, src + (size_t)t * width, (size_t)width * sizeof(float));
}

void CpuBackend::pool_key_blocks(const float* kraw, float* kblock, const int32_t* pos, int T, int cr, int di,
                                 const Weight& norm, float eps, int n_rot, float theta) {
    for (int t = 0; t < T; ++t) {
        if ((pos[t] + 1) % cr != 0) continue;
        const int b = (pos[t] + 1) / cr - 1;
        float* row = kblock + (size_t)b * di;
        mean_rows(kraw + (size_t)b * cr * di, cr, di, row);
        rms_norm(row, &norm, 1, di, di, eps, row);
        const int32_t first = b * cr;
        rope(row, 1, 1, di, n_rot, theta, &first);
    }
}

namespace {
// A KV cache (backend/kv_format.h) read as f32: at(cell, col) is element col of position cell's row.
struct KvRowsF32 {
    const float* p;
    size_t row;   // floats a row
    float at(size_t cell, int col) const { return p[cell * row + col]; }
};
struct KvRowsF16 {
    const uint16_t* p;
    size_t row;   // fp16 values a row
    float at(size_t cell, int col) const { return fp16_to_f32(p[cell * row + col]); }
};
struct KvRowsQ8 {
    const uint8_t* p;
    size_t row_bytes;   // bytes a row (padded to 4)
    size_t width;       // values a row: the scales follow them
    float at(size_t cell, int col) const {
        const uint8_t* r = p + cell * row_bytes;
        uint16_t d;
        std::memcpy(&d, r + width + 2 * (size_t)(col / kKvQ8Group), 2);
        return (float)(int8_t)r[col] * fp16_to_f32(d);
    }
};

// Softmax attention of query-head pairs [i0, i1) over the cells of keep; K and V as KvRows* views.
template <class Rows>
void attention_pairs(const float* q, const Rows& K, const Rows& V, int nh, int nkv, int hd,
                     const std::vector<std::vector<int32_t>>& keep, float* o, int64_t i0, int64_t i1) {
    const int group = nh / nkv;
    const float scale = 1.0f / std::sqrt((float)hd);
    std::vector<float> p;
    for (int64_t i = i0; i < i1; ++i) {
        const int t = (int)(i / nh), h = (int)(i % nh), c0 = (h / group) * hd;
        const float* qh = q + (size_t)t * nh * hd + (size_t)h * hd;
        const std::vector<int32_t>& cells = keep[t];
        p.resize(cells.size());
        float mx = -INFINITY;
        for (size_t c = 0; c < cells.size(); ++c) {
            float d = 0;
            for (int j = 0; j < hd; ++j) d += qh[j] * K.at(cells[c], c0 + j);
            p[c] = d * scale;
            mx = std::max(mx, p[c]);
        }
        float sum = 0;
        for (float& v : p) { v = std::exp(v - mx); sum += v; }
        float* oh = o + (size_t)t * nh * hd + (size_t)h * hd;
        std::fill(oh, oh + hd, 0.0f);
        for (size_t c = 0; c < cells.size(); ++c) {
            const float w = p[c] / sum;
            for (int j = 0; j < hd; ++j) oh[j] += w * V.at(cells[c], c0 + j);
        }
    }
}

// One row of `width` values in the q8 format of backend/kv_format.h.
void quantize_kv_q8_row(const float* x, size_t width, uint8_t* out) {
    for (size_t g = 0; g < kv_q8_groups(width); ++g) {
        const size_t j0 = g * kKvQ8Group, j1 = std::min(width, j0 + kKvQ8Group);
        float amax = 0;
        for (size_t j = j0; j < j1; ++j) amax = std::max(amax, std::fabs(x[j]));
        const uint16_t dh = f32_to_fp16(amax / 127.0f);
        const float d = fp16_to_f32(dh);
        for (size_t j = j0; j < j1; ++j) {
            const float v = d > 0 ? std::nearbyint(x[j] / d) : 0.0f;
            out[j] = (uint8_t)(int8_t)std::max(-127.0f, std::min(127.0f, v));
        }
        std::memcpy(out + width + 2 * g, &dh, 2);
    }
}
}  // namespace

void CpuBackend::attention(const float* q, const float* K, const float* V, int T, int nh, int nkv, int hd,
                           const std::vector<std::vector<int32_t>>& keep, float* o) {
    OpProfile::Scope prof(profile_, "attention");
    const KvRowsF32 k{K, (size_t)nkv * hd}, v{V, (size_t)nkv * hd};
    pool_.parallel_for((int64_t)T * nh, [&](int64_t i0, int64_t i1) {
        attention_pairs(q, k, v, nh, nkv, hd, keep, o, i0, i1);
    });
}

void CpuBackend::write_kv(float* cache, const float* src, int T, int width, const int32_t* pos) {
    switch (kv_type()) {
    case KvType::f32: return scatter_rows(cache, src, T, width, pos);
    case KvType::f16: {
        uint16_t* c = reinterpret_cast<uint16_t*>(cache);
        for (int t = 0; t < T; ++t)
            for (int j = 0; j < width; ++j) c[(size_t)pos[t] * width + j] = f32_to_fp16(src[(size_t)t * width + j]);
        return;
    }
    case KvType::q8: {
        const size_t row = kv_row_floats(KvType::q8, width);
        for (int t = 0; t < T; ++t)
            quantize_kv_q8_row(src + (size_t)t * width, width, reinterpret_cast<uint8_t*>(cache + (size_t)pos[t] * row));
        return;
    }
    }
}

void CpuBackend::indexer_scores(const float* q, const float* kb, int T, const int32_t* pos, int cr, int ni, int di,
                                float scale, float* s, int stride) {
    for (int t = 0; t < T; ++t) {
        const float* qt = q + (size_t)t * ni * di;
        const int nb = std::min((pos[t] + 1) / cr, stride);
        for (int b = 0; b < nb; ++b) {
            float acc = 0;
            for (int h = 0; h < ni; ++h) {
                float d = 0;
                for (int j = 0; j < di; ++j) d += qt[(size_t)h * di + j] * kb[(size_t)b * di + j];
                acc += std::max(d, 0.0f);
            }
            s[(size_t)t * stride + b] = scale * acc;
        }
    }
}

void CpuBackend::select_cells(const float* scores, int stride, int T, const int32_t* pos, int cr, int kb,
                              const int32_t* off, int32_t* cells) {
    for (int t = 0; t < T; ++t) {
        const int M = pos[t] + 1, nb = M / cr;
        STRATA_CHECK(nb <= stride, "select_cells: ", nb, " blocks for score rows of ", stride);
        int32_t* out = cells + off[t];
        if (nb <= kb) {
            for (int c = 0; c < M; ++c) out[c] = c;
            continue;
        }
        std::vector<int32_t> chosen = torch_topk_indices(scores + (size_t)t * stride, nb, kb);
        std::sort(chosen.begin(), chosen.end());
        for (int32_t b : chosen)
            for (int j = 0; j < cr; ++j) *out++ = b * cr + j;
        for (int c = nb * cr; c < M; ++c) *out++ = c;   // the incomplete tail block
    }
}

void CpuBackend::attention_cells(const float* q, const float* K, const float* V, int T, int nh, int nkv, int hd,
                                 const int32_t* off, const int32_t* cells, int max_cells, float* o) {
    std::vector<std::vector<int32_t>> keep(T);
    for (int t = 0; t < T; ++t) {
        const int n = off[t + 1] - off[t];
        STRATA_CHECK(n >= 0 && (max_cells < 0 || n <= max_cells), "attention_cells: query ", t, " has ", n,
                     " cells, more than the bound ", max_cells);
        if (cells) keep[t].assign(cells + off[t], cells + off[t + 1]);
        else {
            keep[t].resize(n);
            std::iota(keep[t].begin(), keep[t].end(), 0);
        }
    }
    if (kv_type() == KvType::f32) return attention(q, K, V, T, nh, nkv, hd, keep, o);
    OpProfile::Scope prof(profile_, "attention");
    const size_t width = (size_t)nkv * hd;
    if (kv_type() == KvType::f16) {
        const KvRowsF16 k{reinterpret_cast<const uint16_t*>(K), width}, v{reinterpret_cast<const uint16_t*>(V), width};
        pool_.parallel_for((int64_t)T * nh, [&](int64_t i0, int64_t i1) {
            attention_pairs(q, k, v, nh, nkv, hd, keep, o, i0, i1);
        });
        return;
    }
    const size_t row_bytes = 4 * kv_row_floats(KvType::q8, width);
    const KvRowsQ8 k{reinterpret_cast<const uint8_t*>(K), row_bytes, width},
        v{reinterpret_cast<const uint8_t*>(V), row_bytes, width};
    pool_.parallel_for((int64_t)T * nh, [&](int64_t i0, int64_t i1) {
        attention_pairs(q, k, v, nh, nkv, hd, keep, o, i0, i1);
    });
}

void CpuBackend::route_topk(const float* logits, int T, int E, int k, int32_t* ids, float* weights) {
    STRATA_CHECK(k >= 1 && k <= E, "route_topk: k = ", k, " for ", E, " experts");
    std::vector<float> p(E);
    for (int t = 0; t < T; ++t) {
        const float* lt = logits + (size_t)t * E;
        const float mx = *std::max_element(lt, lt + E);
        float sum = 0;
        for (int e = 0; e < E; ++e) { p[e] = std::exp(lt[e] - mx); sum += p[e]; }
        for (int e = 0; e < E; ++e) p[e] /= sum;
        const std::vector<int32_t> top_ids = torch_topk_indices(p.data(), E, k);
        float top = 0;
        for (int j = 0; j < k; ++j) top += p[top_ids[j]];
        for (int j = 0; j < k; ++j) {
            ids[(size_t)t * k + j] = top_ids[j];
            weights[(size_t)t * k + j] = p[top_ids[j]] / top;
        }
    }
}

void CpuBackend::prepare_weights(const ModelWeights& mw) {
    if (routing_out_path_.empty()) return;
    int n_experts = 0;
    for (const LayerWeights& lw : mw.layers) {
        if (!lw.moe.gate_exps.present()) continue;
        moe_layer_by_data_[lw.moe.gate_exps.data] = (int)moe_layer_by_data_.size();
        n_experts = (int)lw.moe.gate_exps.ne[2];
    }
    if (!moe_layer_by_data_.empty())
        routing_out_ = std::make_unique<RoutingProfile>((int)moe_layer_by_data_.size(), n_experts);
}

void CpuBackend::save_routing_profile() const {
    if (!routing_out_) return;
    routing_out_->save(routing_out_path_);
    log_info("experts", "routing profile written to " + routing_out_path_);
}

void CpuBackend::moe_experts(const MoeWeights& w, const float* x, int T, int k, const int32_t* ids,
                             const float* weights, float* y) {
    OpProfile::Scope prof(profile_, "moe_experts", ggml_type_name(w.gate_exps.type));
    if (routing_out_) {
        auto it = moe_layer_by_data_.find(w.gate_exps.data);
        if (it != moe_layer_by_data_.end()) routing_out_->add(it->second, ids, T * k);
    }
    const int64_t H = w.gate_exps.ne[0];
    std::vector<ExpertPair> pairs((size_t)T * k);
    for (int t = 0; t < T; ++t)
        for (int j = 0; j < k; ++j) pairs[(size_t)t * k + j] = {t, ids[(size_t)t * k + j]};
    std::vector<float> down((size_t)T * k * H);   // expert outputs per (token, slot), summed in slot order
    compute_experts_cpu(pool_, f32_activations_, w.gate_exps, w.up_exps, w.down_exps, x, pairs, down.data());
    for (int t = 0; t < T; ++t) {
        float* yt = y + (size_t)t * H;
        for (int64_t c = 0; c < H; ++c) {
            float acc = 0;
            for (int j = 0; j < k; ++j) acc += weights[(size_t)t * k + j] * down[((size_t)t * k + j) * H + c];
            yt[c] = acc;
        }
    }
}

}  // namespace strata
