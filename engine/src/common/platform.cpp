// platform.h for POSIX (Linux) and for Windows (MSVC or MinGW-w64); the CPUID helpers at the end serve both.
#include "common/platform.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>

#ifdef _WIN32
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#include <fcntl.h>
#include <io.h>
#include <malloc.h>
#else
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <fstream>
#endif

#if defined(_MSC_VER)
#include <intrin.h>
#include <immintrin.h>
#else
#include <cpuid.h>
#endif

namespace strata::platform {

#ifdef _WIN32

namespace {
HANDLE as_handle(FileHandle f) { return reinterpret_cast<HANDLE>(f.value); }
}  // namespace

FileHandle open_read_only(const std::string& path) {
    HANDLE h = CreateFileA(path.c_str(), GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                           nullptr, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, nullptr);
    FileHandle f;
    if (h != INVALID_HANDLE_VALUE) f.value = reinterpret_cast<intptr_t>(h);
    return f;
}

FileHandle open_read_only_unbuffered(const std::string& path) {
    HANDLE h = CreateFileA(path.c_str(), GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                           nullptr, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL | FILE_FLAG_NO_BUFFERING, nullptr);
    FileHandle f;
    if (h != INVALID_HANDLE_VALUE) f.value = reinterpret_cast<intptr_t>(h);
    return f;
}

void close_file(FileHandle& f) {
    if (f.is_open()) CloseHandle(as_handle(f));
    f.value = -1;
}

int64_t file_size(FileHandle f) {
    LARGE_INTEGER size;
    if (!GetFileSizeEx(as_handle(f), &size)) return -1;
    return (int64_t)size.QuadPart;
}

int64_t read_at(FileHandle f, void* dst, uint64_t n, uint64_t offset) {
    uint8_t* out = static_cast<uint8_t*>(dst);
    uint64_t done = 0;
    while (done < n) {
        // ReadFile takes a 32-bit count; an OVERLAPPED offset on a synchronous handle makes it a positioned read.
        DWORD want = (DWORD)std::min<uint64_t>(n - done, 1u << 30), got = 0;
        OVERLAPPED ov = {};
        uint64_t pos = offset + done;
        ov.Offset = (DWORD)(pos & 0xffffffffu);
        ov.OffsetHigh = (DWORD)(pos >> 32);
        if (!ReadFile(as_handle(f), out + done, want, &got, &ov)) {
            if (GetLastError() == ERROR_HANDLE_EOF) break;
            return -1;
        }
        if (got == 0) break;
        done += got;
    }
    return (int64_t)done;
}

bool map_range(FileHandle f, uint64_t offset, uint64_t n, MappedRange& out) {
    uint64_t start = offset / map_alignment() * map_alignment();
    uint64_t length = offset + n - start;
    if (n == 0 || length > (uint64_t)SIZE_MAX) {
        SetLastError(ERROR_INVALID_PARAMETER);
        return false;
    }
    HANDLE mapping = CreateFileMappingA(as_handle(f), nullptr, PAGE_READONLY, 0, 0, nullptr);
    if (!mapping) return false;
    void* base = MapViewOfFile(mapping, FILE_MAP_READ, (DWORD)(start >> 32), (DWORD)(start & 0xffffffffu),
                               (SIZE_T)length);
    DWORD map_error = GetLastError();
    CloseHandle(mapping);  // the view keeps the mapping object alive
    if (!base) {
        SetLastError(map_error);
        return false;
    }
    out.base = base;
    out.length = (size_t)length;
    out.data = static_cast<const uint8_t*>(base) + (offset - start);
    return true;
}

void unmap_range(MappedRange& m) {
    if (m.base) UnmapViewOfFile(m.base);
    m = MappedRange{};
}

uint64_t map_alignment() {
    static const uint64_t granularity = [] {
        SYSTEM_INFO info;
        GetSystemInfo(&info);
        return (uint64_t)info.dwAllocationGranularity;
    }();
    return granularity;
}

void* aligned_alloc_bytes(size_t alignment, size_t bytes) { return _aligned_malloc(bytes, alignment); }
void aligned_free(void* p) { _aligned_free(p); }

// CPU numbers are group * 64 + bit, matching pin_current_thread.
std::vector<int> first_cpu_of_each_core() {
    std::vector<int> cpus;
    DWORD bytes = 0;
    GetLogicalProcessorInformationEx(RelationProcessorCore, nullptr, &bytes);
    std::vector<uint8_t> buf(bytes);
    auto* info = reinterpret_cast<SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX*>(buf.data());
    if (bytes && GetLogicalProcessorInformationEx(RelationProcessorCore, info, &bytes)) {
        for (DWORD off = 0; off < bytes;) {
            auto* entry = reinterpret_cast<SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX*>(buf.data() + off);
            const GROUP_AFFINITY& g = entry->Processor.GroupMask[0];
            for (int bit = 0; bit < 64; ++bit) {
                if (g.Mask & ((KAFFINITY)1 << bit)) {
                    cpus.push_back((int)g.Group * 64 + bit);
                    break;
                }
            }
            off += entry->Size;
        }
    }
    std::sort(cpus.begin(), cpus.end());
    if (cpus.empty()) {
        int n = (int)std::thread::hardware_concurrency();
        for (int cpu = 0; cpu < std::max(n, 1); ++cpu) cpus.push_back(cpu);
    }
    return cpus;
}

void pin_current_thread(int cpu) {
    GROUP_AFFINITY affinity = {};
    affinity.Group = (WORD)(cpu / 64);
    affinity.Mask = (KAFFINITY)1 << (cpu % 64);
    SetThreadGroupAffinity(GetCurrentThread(), &affinity, nullptr);
}

void set_binary_stdio() {
    _setmode(_fileno(stdin), _O_BINARY);
    _setmode(_fileno(stdout), _O_BINARY);
}

std::string last_error_text() {
    DWORD code = GetLastError();
    char buf[512] = {};
    DWORD len = FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, nullptr, code,
                               MAKELANGID(LANG_NEUTRAL, SUBLANG_DEFAULT), buf, sizeof buf, nullptr);
    std::string text(buf, len);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == '.' || text.back() == ' '))
        text.pop_back();
    return (text.empty() ? "unknown error" : text) + " (Windows error " + std::to_string(code) + ")";
}

#else  // POSIX

FileHandle open_read_only(const std::string& path) {
    FileHandle f;
    f.value = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    return f;
}

FileHandle open_read_only_unbuffered(const std::string& path) {
    FileHandle f;
#ifdef O_DIRECT
    f.value = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
#endif
    return f;
}

void close_file(FileHandle& f) {
    if (f.is_open()) ::close((int)f.value);
    f.value = -1;
}

int64_t file_size(FileHandle f) {
    struct stat st;
    if (fstat((int)f.value, &st) != 0) return -1;
    return (int64_t)st.st_size;
}

int64_t read_at(FileHandle f, void* dst, uint64_t n, uint64_t offset) {
    static_assert(sizeof(off_t) == 8, "64-bit file offsets are required");
    uint8_t* out = static_cast<uint8_t*>(dst);
    uint64_t done = 0;
    while (done < n) {
        ssize_t got = pread((int)f.value, out + done, (size_t)std::min<uint64_t>(n - done, 1u << 30),
                            (off_t)(offset + done));
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return -1;
        if (got == 0) break;
        done += (uint64_t)got;
    }
    return (int64_t)done;
}

bool map_range(FileHandle f, uint64_t offset, uint64_t n, MappedRange& out) {
    uint64_t start = offset / map_alignment() * map_alignment();
    uint64_t length = offset + n - start;
    if (n == 0 || length > (uint64_t)SIZE_MAX) {
        errno = EINVAL;
        return false;
    }
    void* base = mmap(nullptr, (size_t)length, PROT_READ, MAP_SHARED, (int)f.value, (off_t)start);
    if (base == MAP_FAILED) return false;
    out.base = base;
    out.length = (size_t)length;
    out.data = static_cast<const uint8_t*>(base) + (offset - start);
    return true;
}

void unmap_range(MappedRange& m) {
    if (m.base) munmap(m.base, m.length);
    m = MappedRange{};
}

uint64_t map_alignment() {
    static const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    return page;
}

void* aligned_alloc_bytes(size_t alignment, size_t bytes) {
    void* p = nullptr;
    return posix_memalign(&p, alignment, bytes) == 0 ? p : nullptr;
}
void aligned_free(void* p) { std::free(p); }

// From /sys: one entry per (package, core id); a CPU without topology files counts as its own core.
std::vector<int> first_cpu_of_each_core() {
    std::vector<int> cpus;
    std::set<std::pair<std::string, std::string>> seen;
    int n = (int)std::thread::hardware_concurrency();
    for (int cpu = 0; cpu < n; ++cpu) {
        std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
        std::ifstream core(base + "core_id"), pkg(base + "physical_package_id");
        std::string c, p;
        if (!(core >> c) || !(pkg >> p)) { cpus.push_back(cpu); continue; }
        if (seen.insert({p, c}).second) cpus.push_back(cpu);
    }
    if (cpus.empty()) cpus.push_back(0);
    return cpus;
}

void pin_current_thread(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

void set_binary_stdio() {}

std::string last_error_text() { return std::strerror(errno); }

#endif

int64_t available_memory_bytes() {
    if (const char* env = std::getenv("STRATA_MEM_AVAILABLE_MIB")) return (int64_t)std::atoll(env) << 20;
#ifdef _WIN32
    MEMORYSTATUSEX st;
    st.dwLength = sizeof st;
    return GlobalMemoryStatusEx(&st) ? (int64_t)st.ullAvailPhys : -1;
#else
    std::ifstream f("/proc/meminfo");
    std::string key, unit;
    long long kib = 0;
    while (f >> key >> kib >> unit)
        if (key == "MemAvailable:") return (int64_t)kib << 10;
    return -1;
#endif
}

void cpuid(uint32_t leaf, uint32_t subleaf, uint32_t regs[4]) {
    regs[0] = regs[1] = regs[2] = regs[3] = 0;
#if defined(_MSC_VER)
    int r[4];
    __cpuid(r, (int)(leaf & 0x80000000u));
    if ((uint32_t)r[0] < leaf) return;
    __cpuidex(r, (int)leaf, (int)subleaf);
    for (int k = 0; k < 4; ++k) regs[k] = (uint32_t)r[k];
#else
    if (__get_cpuid_max(leaf & 0x80000000u, nullptr) < leaf) return;
    __cpuid_count(leaf, subleaf, regs[0], regs[1], regs[2], regs[3]);
#endif
}

uint64_t read_xcr0() {
#if defined(_MSC_VER)
    return (uint64_t)_xgetbv(0);
#else
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
#endif
}

}  // namespace strata::platform
