// The operating-system calls the engine needs, behind one small API with a POSIX and a Windows implementation:
// read-only files (positioned reads, size, mapped ranges), aligned allocation, CPU topology and thread pinning,
// CPUID, and binary stdin/stdout. Failures return a sentinel; last_error_text() then says why.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::platform {

// An open read-only file: a POSIX file descriptor or a Windows HANDLE, kept as an integer.
struct FileHandle {
    intptr_t value = -1;
    bool is_open() const { return value != -1; }
};

// Returns a handle that is not open on failure. Paths are passed to the OS as they are (UTF-8 on Linux; on Windows
// the process code page, which strata.exe's manifest sets to UTF-8).
FileHandle open_read_only(const std::string& path);
// The same without the OS's file cache (O_DIRECT on Linux, FILE_FLAG_NO_BUFFERING on Windows): positioned reads must
// then start at, last, and land in memory aligned to kUnbufferedAlign. Not open where the OS or the file system
// refuses (tmpfs, some network file systems): the caller falls back to open_read_only.
FileHandle open_read_only_unbuffered(const std::string& path);
constexpr uint64_t kUnbufferedAlign = 4096;   // covers 512-byte and 4 KiB sectors
void close_file(FileHandle& f);  // no-op on a handle that is not open
// The file's size in bytes, or -1 on failure.
int64_t file_size(FileHandle f);
// Reads n bytes starting at byte `offset` of the file (64-bit offsets, any n). Returns the bytes read, which is
// less than n only at the end of the file, or -1 on failure. Does not use or move a shared file position.
int64_t read_at(FileHandle f, void* dst, uint64_t n, uint64_t offset);

// A read-only mapping of part of a file. `data` points at the requested offset; base/length are what was mapped
// (the offset rounded down to map_alignment()).
struct MappedRange {
    void* base = nullptr;
    size_t length = 0;
    const uint8_t* data = nullptr;
};
// Maps bytes [offset, offset + n) of the file; n must be > 0. Returns false on failure.
bool map_range(FileHandle f, uint64_t offset, uint64_t n, MappedRange& out);
void unmap_range(MappedRange& m);
// Mapping offsets are multiples of this: the page size on POSIX, the allocation granularity (64 KiB) on Windows.
uint64_t map_alignment();

// Memory aligned to `alignment` (a power of two, at least sizeof(void*)); nullptr when out of memory.
// Free it with aligned_free, never with free().
void* aligned_alloc_bytes(size_t alignment, size_t bytes);
void aligned_free(void* p);

// The first logical CPU of each physical core (one entry per core, SMT siblings skipped); never empty.
std::vector<int> first_cpu_of_each_core();
// Pins the calling thread to one logical CPU; a failure is ignored (pinning is only a speed hint).
void pin_current_thread(int cpu);

// CPUID leaf/subleaf into regs {eax, ebx, ecx, edx}; all zero when the leaf is above the CPU's maximum.
void cpuid(uint32_t leaf, uint32_t subleaf, uint32_t regs[4]);
// XCR0 (which register states the OS saves); only call when CPUID.1:ECX.OSXSAVE is set.
uint64_t read_xcr0();

// Puts stdin and stdout in binary mode on Windows (so "\n" stays "\n" and 0x1A is not end of file); no-op elsewhere.
void set_binary_stdio();

// The OS's text for the last failed call on this thread (errno or GetLastError()).
std::string last_error_text();

// RAM available to a new allocation without swapping, in bytes (Linux: MemAvailable; Windows: the available physical
// memory); -1 where unknown. STRATA_MEM_AVAILABLE_MIB overrides it (tests: a machine with less RAM).
int64_t available_memory_bytes();

}  // namespace strata::platform
