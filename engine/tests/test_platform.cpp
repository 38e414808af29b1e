// common/platform: positioned reads and mappings past 4 GiB (a sparse file), short reads at the end of the file,
// open errors, aligned allocation, core list and pinning, CPUID bounds. Portable: also cross-built for Windows.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "check.h"
#include "common/platform.h"

namespace platform = strata::platform;

// Past 4 GiB and not a multiple of any page or allocation granularity.
constexpr uint64_t kMarkerOffset = (4ull << 30) + (512ull << 20) + 12345;
constexpr uint64_t kTail = 1000;  // bytes after the marker

static std::vector<uint8_t> marker() {
    std::vector<uint8_t> m(200000);
    for (size_t k = 0; k < m.size(); ++k) m[k] = (uint8_t)(k * 131 + 7);
    return m;
}

// Writes "HEAD" at 0 and the marker at kMarkerOffset; the gap stays a hole on file systems with sparse files.
static bool write_sparse_file(const std::string& path) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write("HEAD", 4);
    f.seekp((std::streamoff)kMarkerOffset);
    std::vector<uint8_t> m = marker();
    f.write(reinterpret_cast<const char*>(m.data()), (std::streamsize)m.size());
    std::vector<char> tail(kTail, 'T');
    f.write(tail.data(), (std::streamsize)tail.size());
    return (bool)f;
}

static void test_large_file(const std::string& path) {
    const std::vector<uint8_t> m = marker();
    const uint64_t size = kMarkerOffset + m.size() + kTail;
    platform::FileHandle f = platform::open_read_only(path);
    CHECK_MSG(f.is_open(), "open %s: %s", path.c_str(), platform::last_error_text().c_str());
    if (!f.is_open()) return;
    CHECK(platform::file_size(f) == (int64_t)size);

    char head[4] = {};
    CHECK(platform::read_at(f, head, 4, 0) == 4 && std::memcmp(head, "HEAD", 4) == 0);
    std::vector<uint8_t> got(m.size());
    CHECK(platform::read_at(f, got.data(), got.size(), kMarkerOffset) == (int64_t)got.size());
    CHECK(got == m);
    // A read running past the end returns what is there; a read starting past the end returns 0.
    std::vector<uint8_t> big(kTail + 5000);
    CHECK(platform::read_at(f, big.data(), big.size(), size - kTail) == (int64_t)kTail);
    CHECK(big[0] == 'T' && big[kTail - 1] == 'T');
    CHECK(platform::read_at(f, big.data(), 10, size + 7) == 0);

    platform::MappedRange r;
    CHECK_MSG(platform::map_range(f, kMarkerOffset, m.size(), r), "map: %s", platform::last_error_text().c_str());
    if (r.data) {
        CHECK(std::memcmp(r.data, m.data(), m.size()) == 0);
        CHECK((uintptr_t)r.base % platform::map_alignment() == 0);
        CHECK(r.data - (const uint8_t*)r.base == (ptrdiff_t)(kMarkerOffset % platform::map_alignment()));
    }
    platform::unmap_range(r);
    CHECK(r.base == nullptr);
    // Two mappings of the same file at once, one of them at offset 0.
    platform::MappedRange a, b;
    CHECK(platform::map_range(f, 1, 3, a) && platform::map_range(f, size - 4, 4, b));
    if (a.data && b.data) CHECK(std::memcmp(a.data, "EAD", 3) == 0 && std::memcmp(b.data, "TTTT", 4) == 0);
    platform::unmap_range(a);
    platform::unmap_range(b);
    CHECK(!platform::map_range(f, 5, 0, a));  // empty range

    platform::close_file(f);
    CHECK(!f.is_open());
    platform::close_file(f);  // closing twice is a no-op
}

static void test_open_error(const std::string& dir) {
    platform::FileHandle f = platform::open_read_only(dir + "/no-such-file.gguf");
    CHECK(!f.is_open());
    std::string why = platform::last_error_text();
    CHECK_MSG(!why.empty(), "no error text");
}

static void test_aligned_alloc() {
    void* p = platform::aligned_alloc_bytes(64, 1000);
    CHECK(p != nullptr && (uintptr_t)p % 64 == 0);
    if (p) std::memset(p, 1, 1000);
    platform::aligned_free(p);
}

static void test_cores() {
    std::vector<int> cpus = platform::first_cpu_of_each_core();
    CHECK(!cpus.empty());
    for (size_t k = 0; k < cpus.size(); ++k) {
        CHECK(cpus[k] >= 0);
        if (k) CHECK(cpus[k] > cpus[k - 1]);
    }
    platform::pin_current_thread(cpus[0]);
}

static void test_cpuid() {
    uint32_t r[4];
    platform::cpuid(0, 0, r);
    uint32_t max_leaf = r[0];
    CHECK(max_leaf >= 1);
    CHECK(r[1] != 0);  // vendor string ("Genu", "Auth", ...)
    platform::cpuid(max_leaf + 1, 0, r);
    CHECK(r[0] == 0 && r[1] == 0 && r[2] == 0 && r[3] == 0);
}

int main() {
    namespace fs = std::filesystem;
    fs::path dir = fs::temp_directory_path() / ("strata-test-platform-" + std::to_string((uintptr_t)&dir % 100000));
    fs::create_directories(dir);
    std::string path = (dir / "sparse.bin").string();
    if (write_sparse_file(path)) {
        test_large_file(path);
    } else {
        CHECK_MSG(false, "cannot write the sparse test file %s", path.c_str());
    }
    test_open_error(dir.string());
    test_aligned_alloc();
    test_cores();
    test_cpuid();
    std::error_code ec;
    fs::remove_all(dir, ec);
    return test::exit_code();
}
