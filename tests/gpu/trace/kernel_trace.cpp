// A kernel tracer injected into any CUDA program (the driver loads it when CUDA_INJECTION64_PATH names
// libstrata_kernel_trace.so): CUPTI's activity records, one line each into the CSV file STRATA_KERNEL_TRACE_OUT
// (default kernel_trace.csv): start_ns,end_ns,stream,graph_node,name. A kernel launch (graph nodes included) has
// its demangled name; a copy or fill on the GPU "[memcpy HtoD] BYTES" / "[memset] BYTES"; a CUDA runtime call on
// the host "[api] cudaGraphLaunch" (stream kHostStream). CUPTI gives the GPU's and the host's records one time
// base, so a pass replayed from CUDA graphs with programmatic dependent launches shows each kernel as it really ran
// and what the host was doing between them: tests/gpu/graph_timeline.py reads the file. For the lent machine,
// which has CUPTI but no Nsight Systems able to export a trace.
#include <cxxabi.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include <cupti.h>

namespace {

constexpr size_t kBufferBytes = 8 << 20;   // one activity buffer (CUPTI asks for more as they fill)
// Completed records reach the file at least this often: at exit the CUDA context may be gone before atexit's flush.
constexpr auto kFlushEvery = std::chrono::milliseconds(100);

std::FILE* g_out = nullptr;
std::mutex g_mu;
std::atomic<uint64_t> g_kernels{0}, g_others{0}, g_dropped{0};
constexpr unsigned kHostStream = 0xffffffffu;   // the stream column of a runtime call
std::atomic<bool> g_stop{false};   // the flushing thread stops at exit

void check(CUptiResult r, const char* what) {
    if (r == CUPTI_SUCCESS) return;
    const char* msg = nullptr;
    cuptiGetResultString(r, &msg);
    std::fprintf(stderr, "kernel_trace: %s failed: %s\n", what, msg ? msg : "?");
    std::exit(3);
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0;   // as many as fit
}

// A name for the CSV: demangled, commas (template argument lists) replaced so the line keeps five fields.
void write_name(std::FILE* f, const char* mangled) {
    int status = 0;
    char* dem = mangled ? abi::__cxa_demangle(mangled, nullptr, nullptr, &status) : nullptr;
    const char* name = dem && status == 0 ? dem : mangled ? mangled : "?";
    for (const char* p = name; *p; ++p) std::fputc(*p == ',' ? ';' : *p, f);
    std::free(dem);
}

const char* copy_kind(uint8_t kind) {
    switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "PtoP";
    default: return "other";
    }
}

void write_row(uint64_t start, uint64_t end, unsigned stream, uint64_t node) {
    std::fprintf(g_out, "%llu,%llu,%u,%llu,", (unsigned long long)start, (unsigned long long)end, stream,
                 (unsigned long long)node);
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    std::lock_guard<std::mutex> lk(g_mu);
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
            write_row(k->start, k->end, k->streamId, k->graphNodeId);
            write_name(g_out, k->name);
            std::fputc('\n', g_out);
            ++g_kernels;
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
            write_row(m->start, m->end, m->streamId, m->graphNodeId);
            std::fprintf(g_out, "[memcpy %s] %llu\n", copy_kind(m->copyKind), (unsigned long long)m->bytes);
            ++g_others;
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
            write_row(m->start, m->end, m->streamId, m->graphNodeId);
            std::fprintf(g_out, "[memset] %llu\n", (unsigned long long)m->bytes);
            ++g_others;
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
            const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(rec);
            const char* name = nullptr;
            if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name) != CUPTI_SUCCESS || !name)
                name = "?";
            write_row(a->start, a->end, kHostStream, 0);
            std::fprintf(g_out, "[api] %s\n", name);
            ++g_others;
        }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS) g_dropped += dropped;
    std::free(buffer);
}

void finish() {
    g_stop = true;
    cuptiActivityFlushAll(1);
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_out) return;
    std::fclose(g_out);
    g_out = nullptr;
    std::fprintf(stderr, "kernel_trace: %llu kernels and %llu copies, fills and runtime calls written, %llu records "
                 "dropped\n", (unsigned long long)g_kernels.load(), (unsigned long long)g_others.load(),
                 (unsigned long long)g_dropped.load());
}

}  // namespace

// Called by the CUDA driver when it initialises (CUDA_INJECTION64_PATH names this library).
extern "C" int InitializeInjection(void) {
    const char* path = std::getenv("STRATA_KERNEL_TRACE_OUT");
    g_out = std::fopen(path && *path ? path : "kernel_trace.csv", "w");
    if (!g_out) {
        std::fprintf(stderr, "kernel_trace: cannot write %s\n", path ? path : "kernel_trace.csv");
        return 0;
    }
    std::fputs("start_ns,end_ns,stream,graph_node,name\n", g_out);
    check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable(CONCURRENT_KERNEL)");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "cuptiActivityEnable(MEMCPY)");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "cuptiActivityEnable(MEMSET)");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME), "cuptiActivityEnable(RUNTIME)");
    std::atexit(finish);
    std::thread([] {
        while (!g_stop) {
            std::this_thread::sleep_for(kFlushEvery);
            if (!g_stop) cuptiActivityFlushAll(0);
        }
    }).detach();
    return 1;
}
