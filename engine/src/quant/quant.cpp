// Run-time ISA choice (CPUID + XGETBV) and dispatch of vec_dot / gemv_rows to the scalar, AVX2 or AVX-512 kernels.
#include <algorithm>
#include <atomic>
#include <immintrin.h>
#include "quant/quant_internal.h"
#include "common/error.h"
#include "common/platform.h"

namespace strata {
using namespace qk;

namespace {

struct CpuFeatures {
    bool avx2 = false, avx512 = false, avx512_vnni = false;
};

CpuFeatures probe_cpu() {
    CpuFeatures f;
    uint32_t r[4];
    platform::cpuid(1, 0, r);
    uint32_t b = r[1], c = r[2];
    bool osxsave = c & (1u << 27), fma = c & (1u << 12), f16c = c & (1u << 29);
    if (!osxsave) return f;
    uint64_t xcr0 = platform::read_xcr0();
    bool os_ymm = (xcr0 & 0x6) == 0x6, os_zmm = (xcr0 & 0xe6) == 0xe6;
    platform::cpuid(7, 0, r);  // all zero on a CPU without leaf 7
    b = r[1], c = r[2];
    bool avx2 = b & (1u << 5), bmi2 = b & (1u << 8);
    bool avx512f = b & (1u << 16), avx512dq = b & (1u << 17), avx512bw = b & (1u << 30), avx512vl = b & (1u << 31);
    bool vnni = c & (1u << 11);
    f.avx2 = os_ymm && avx2 && fma && f16c && bmi2;
    f.avx512 = f.avx2 && os_zmm && avx512f && avx512dq && avx512bw && avx512vl;
    f.avx512_vnni = f.avx512 && vnni;
    return f;
}

const CpuFeatures& cpu() {
    static const CpuFeatures f = probe_cpu();
    return f;
}

// t[0..2] follow Isa; t[3] is AVX-512 with the VNNI kernels (filled only on a CPU that has them).
struct Tables {
    DotTable t[4];
    Tables() {
        fill_dots_scalar(t[0]);
        t[1] = t[0];
        fill_dots_avx2(t[1]);
        t[2] = t[1];
        fill_dots_avx512(t[2]);
        t[3] = t[2];
        if (cpu().avx512_vnni) fill_dots_avx512_vnni(t[3]);
    }
};

const Tables& tables() {
    static const Tables t;
    return t;
}

inline void prefetch_row(const uint8_t* p, size_t bytes) {
    for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
}

std::atomic<int> g_active{-1};
std::atomic<bool> g_vnni{true};

DotFn dot_fn(Isa isa, GgmlType t) {
    STRATA_CHECK((uint32_t)t < (uint32_t)kMaxType && quant_supported(t), "vec_dot: unsupported weight type id ",
                 (uint32_t)t);
    int table = (int)isa;
    if (isa == Isa::avx512 && avx512_vnni_active()) table = 3;
    return tables().t[table].dot[(int)t];
}

MultiFn multi_fn(GgmlType t) {
    int table = (int)active_isa();
    if (table == (int)Isa::avx512 && avx512_vnni_active()) table = 3;
    return tables().t[table].multi[(int)t];
}

// The two-row kernel of the table multi_fn uses, or null.
Rows2Fn rows2_fn(GgmlType t) {
    int table = (int)active_isa();
    if (table == (int)Isa::avx512 && avx512_vnni_active()) table = 3;
    return tables().t[table].rows2[(int)t];
}

// y[r] for rows [r0, r1) against one activation row, with whole rows prefetched `ahead` rows ahead; pairs of rows
// through the two-row kernel where the type has one (the same bits as f row by row).
void rows_one_act(DotFn f, Rows2Fn f2, int64_t n, const uint8_t* base, size_t row_bytes, int64_t r0, int64_t r1,
                  const void* act, float* y) {
    const int64_t ahead = std::clamp<int64_t>((int64_t)(8192 / row_bytes), 1, 4);
    for (int64_t r = r0; r < std::min(r1, r0 + ahead); ++r) prefetch_row(base + (size_t)r * row_bytes, row_bytes);
    int64_t r = r0;
    if (f2)
        for (; r + 2 <= r1; r += 2) {
            for (int64_t p = r + ahead; p < std::min(r1, r + 2 + ahead); ++p)
                prefetch_row(base + (size_t)p * row_bytes, row_bytes);
            f2(n, base + (size_t)r * row_bytes, row_bytes, act, y + r);
        }
    for (; r < r1; ++r) {
        if (r + ahead < r1) prefetch_row(base + (size_t)(r + ahead) * row_bytes, row_bytes);
        y[r] = f(n, base + (size_t)r * row_bytes, act);
    }
}

}  // namespace

void set_avx512_vnni(bool enabled) { g_vnni.store(enabled, std::memory_order_relaxed); }
bool avx512_vnni_active() { return cpu().avx512_vnni && g_vnni.load(std::memory_order_relaxed); }

Isa cpu_best_isa() {
    if (cpu().avx512) return Isa::avx512;
    if (cpu().avx2) return Isa::avx2;
    return Isa::scalar;
}

Isa active_isa() {
    int a = g_active.load(std::memory_order_relaxed);
    return a < 0 ? cpu_best_isa() : (Isa)a;
}

void set_active_isa(Isa isa) {
    if ((int)isa > (int)cpu_best_isa()) isa = cpu_best_isa();
    g_active.store((int)isa, std::memory_order_relaxed);
}

const char* isa_name(Isa isa) {
    switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    }
    return "?";
}

static void check_row_length(GgmlType t, int64_t n) {
    const GgmlTypeInfo& info = ggml_type_info(t);
    const int64_t act_block = act_format(t) == ActFormat::Q8_K ? QK_K : act_format(t) == ActFormat::Q8_0 ? 32 : 1;
    STRATA_CHECK(n % info.block_elems == 0 && n % act_block == 0, "vec_dot: n = ", n, " does not fit the ",
                 info.name, " block of ", info.block_elems);
}

float vec_dot_isa(Isa isa, GgmlType t, int64_t n, const void* w, const void* act) {
    STRATA_CHECK((int)isa <= (int)cpu_best_isa(), "vec_dot_isa: this CPU has no ", isa_name(isa));
    check_row_length(t, n);
    return dot_fn(isa, t)(n, w, act);
}

float vec_dot(GgmlType t, int64_t n, const void* w, const void* act) { return vec_dot_isa(active_isa(), t, n, w, act); }

void gemv_rows(GgmlType t, int64_t n, const void* w, size_t row_bytes, int64_t r0, int64_t r1, const void* act,
               float* y) {
    if (r1 <= r0) return;
    DotFn f = dot_fn(active_isa(), t);
    // Low-bit rows are consumed slowly enough that the hardware prefetcher alone leaves DRAM latency exposed
    // (measured: 2-bit gemv ran at half its in-cache speed): rows_one_act fetches whole rows 4 ahead, at most ~8 KB.
    rows_one_act(f, rows2_fn(t), n, (const uint8_t*)w, row_bytes, r0, r1, act, y);
}

void gemv_rows_multi(GgmlType t, int64_t n, const void* w, size_t row_bytes, int64_t r0, int64_t r1,
                     const void* acts, int n_act, size_t act_stride, float* y, size_t y_stride) {
    if (r1 <= r0 || n_act <= 0) return;
    DotFn f = dot_fn(active_isa(), t);
    check_row_length(t, n);
    MultiFn m = multi_fn(t);
    const uint8_t* base = (const uint8_t*)w;
    if (n_act == 1) {   // y_stride does not matter for one activation row
        rows_one_act(f, rows2_fn(t), n, base, row_bytes, r0, r1, acts, y);
        return;
    }
    const uint8_t* act = (const uint8_t*)acts;
    const int64_t ahead = std::clamp<int64_t>((int64_t)(8192 / row_bytes), 1, 4);
    for (int64_t r = r0; r < std::min(r1, r0 + ahead); ++r) prefetch_row(base + (size_t)r * row_bytes, row_bytes);
    float out[kMaxMultiAct];
    for (int64_t r = r0; r < r1; ++r) {
        if (r + ahead < r1) prefetch_row(base + (size_t)(r + ahead) * row_bytes, row_bytes);
        const uint8_t* row = base + (size_t)r * row_bytes;
        for (int t0 = 0; t0 < n_act; t0 += kMaxMultiAct) {
            const int na = std::min(kMaxMultiAct, n_act - t0);
            const uint8_t* a0 = act + (size_t)t0 * act_stride;
            if (m) {
                m(n, row, a0, act_stride, na, out);
            } else {  // no multi kernel for this type and ISA: one dot per activation
                for (int k = 0; k < na; ++k) out[k] = f(n, row, a0 + (size_t)k * act_stride);
            }
            for (int k = 0; k < na; ++k) y[(size_t)(t0 + k) * y_stride + r] = out[k];
        }
    }
}

}  // namespace strata
