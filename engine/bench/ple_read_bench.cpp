// What the PLE table's reads cost (model/ple_reader.h): a decode step's 16 rows and a prompt chunk's 16 rows a token,
// drawn at random from a large file, read (a) the way the engine read them before 2026-12-04, one buffered pread
// after another on the calling thread, with the file's pages dropped from the cache before each step (the real
// table is 28.8 GB: on a 64 GB PC beside ~35 GB of pinned experts it is mostly not cached), and (b) by PleReader,
// unbuffered, with 1 … 32 I/O threads and no row cache, and (c) by PleReader with its row cache (32 threads), on decode
// steps of which a share asks again for an earlier step's rows (its n-grams seen before), and on prompt chunks of new
// rows (the cache's own cost). JSON on stdout.
// usage: ple_read_bench --file F [--gb 4] [--row-bytes 110] [--steps 200] [--chunk 1024] [--threads 1,4,16,32]
//        [--repeat 0,0.17,0.3,0.9]
//        (F is written with random bytes when it is missing or smaller than --gb; it is kept for the next run)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#ifndef _WIN32
#include <fcntl.h>
#include <unistd.h>
#endif

#include "common/platform.h"
#include "model/ple_reader.h"

using namespace strata;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
    std::string file;
    double gb = 4;
    size_t row_bytes = 110;   // Q5_0 rows of 160 values (IQ4_NL: 90)
    int steps = 200, chunk = 1024, chunks = 3;
    std::vector<int> threads = {1, 4, 16, 32};
    std::vector<double> repeat = {0, 0.17, 0.3, 0.9};   // trigram repeat shares (bench/ple_ngram_repeat.py)
};

// "1,4,16" -> {1, 4, 16} (T int or double)
template <class T>
std::vector<T> number_list(const std::string& s) {
    std::vector<T> v;
    for (size_t p = 0; p < s.size();) {
        size_t q = s.find(',', p);
        if (q == std::string::npos) q = s.size();
        v.push_back((T)std::atof(s.substr(p, q - p).c_str()));
        p = q + 1;
    }
    return v;
}

void ensure_file(const Options& o) {
    const uint64_t want = (uint64_t)(o.gb * (1ull << 30));
    platform::FileHandle f = platform::open_read_only(o.file);
    const int64_t have = f.is_open() ? platform::file_size(f) : -1;
    platform::close_file(f);
    if (have >= (int64_t)want) return;
    std::fprintf(stderr, "writing %.1f GB of random bytes to %s\n", o.gb, o.file.c_str());
    std::ofstream out(o.file, std::ios::binary | std::ios::trunc);
    std::mt19937_64 rng(1);
    std::vector<uint64_t> block(1 << 17);   // 1 MiB
    for (uint64_t done = 0; done < want; done += block.size() * 8) {
        for (uint64_t& w : block) w = rng();
        out.write((const char*)block.data(), (std::streamsize)(block.size() * 8));
    }
}

// The file's pages out of the OS cache (POSIX; elsewhere the sequential case runs on whatever is cached).
void drop_cache(const std::string& path) {
#ifndef _WIN32
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd >= 0) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        ::close(fd);
    }
#endif
}

struct Timing {
    double median_us = 0, p90_us = 0, mean_us = 0;
};
Timing summarize(std::vector<double> us) {
    std::sort(us.begin(), us.end());
    Timing t;
    t.median_us = us[us.size() / 2];
    t.p90_us = us[(size_t)(0.9 * (us.size() - 1))];
    for (double v : us) t.mean_us += v / us.size();
    return t;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--file") o.file = v;
        else if (k == "--gb") o.gb = std::atof(v.c_str());
        else if (k == "--row-bytes") o.row_bytes = (size_t)std::atoi(v.c_str());
        else if (k == "--steps") o.steps = std::atoi(v.c_str());
        else if (k == "--chunk") o.chunk = std::atoi(v.c_str());
        else if (k == "--threads") o.threads = number_list<int>(v);
        else if (k == "--repeat") o.repeat = number_list<double>(v);
        else { std::fprintf(stderr, "unknown option %s\n", k.c_str()); return 2; }
    }
    if (o.file.empty()) { std::fprintf(stderr, "usage: ple_read_bench --file F [--gb 4] ...\n"); return 2; }
    ensure_file(o);
    platform::FileHandle f = platform::open_read_only(o.file);
    const uint64_t rows_in_file = (uint64_t)(platform::file_size(f) - 4096) / o.row_bytes;
    std::mt19937_64 rng(2);
    auto draw = [&](size_t n) {
        std::vector<uint64_t> r(n);
        for (uint64_t& x : r) x = rng() % rows_in_file;
        return r;
    };
    const uint64_t table_offset = 1000;   // unaligned, as a GGUF tensor's data may be
    // o.chunks prompt chunks of 16 new rows a token through a reader: the median ms a chunk
    auto chunk_median_ms = [&](PleReader& reader) {
        std::vector<double> ms;
        for (int c = 0; c < o.chunks; ++c) {
            const std::vector<uint64_t> rows = draw((size_t)16 * o.chunk);
            const auto t0 = Clock::now();
            reader.begin(rows.data(), rows.size());
            reader.wait();
            ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        }
        std::sort(ms.begin(), ms.end());
        return ms[ms.size() / 2];
    };
    std::vector<uint8_t> buf(o.row_bytes);

    std::printf("{\n  \"file_gb\": %.1f, \"row_bytes\": %zu, \"decode_rows\": 16, \"chunk_tokens\": %d,\n", o.gb,
                o.row_bytes, o.chunk);
    // (a) one buffered pread after another, cold pages
    std::vector<double> step_us;
    for (int s = 0; s < o.steps; ++s) {
        const std::vector<uint64_t> rows = draw(16);
        drop_cache(o.file);
        const auto t0 = Clock::now();
        for (uint64_t r : rows) platform::read_at(f, buf.data(), o.row_bytes, table_offset + r * o.row_bytes);
        step_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    Timing seq = summarize(step_us);
    std::vector<double> chunk_ms;
    for (int c = 0; c < o.chunks; ++c) {
        const std::vector<uint64_t> rows = draw((size_t)16 * o.chunk);
        drop_cache(o.file);
        const auto t0 = Clock::now();
        for (uint64_t r : rows) platform::read_at(f, buf.data(), o.row_bytes, table_offset + r * o.row_bytes);
        chunk_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    std::sort(chunk_ms.begin(), chunk_ms.end());
    std::printf("  \"sequential_buffered_cold\": {\"step_us_median\": %.1f, \"step_us_p90\": %.1f, \"chunk_ms_median\": "
                "%.1f},\n  \"ple_reader\": [",
                seq.median_us, seq.p90_us, chunk_ms[chunk_ms.size() / 2]);
    platform::close_file(f);
    // (b) PleReader, unbuffered
    bool first = true;
    for (int n : o.threads) {
        PleReader reader(o.file, table_offset, o.row_bytes, n, true, 0);
        step_us.clear();
        for (int s = 0; s < o.steps; ++s) {
            const std::vector<uint64_t> rows = draw(16);
            const auto t0 = Clock::now();
            reader.begin(rows.data(), rows.size());
            reader.wait();
            step_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        }
        const Timing t = summarize(step_us);
        std::printf("%s\n    {\"io_threads\": %d, \"unbuffered\": %s, \"step_us_median\": %.1f, \"step_us_p90\": %.1f, "
                    "\"chunk_ms_median\": %.1f}",
                    first ? "" : ",", n, reader.unbuffered() ? "true" : "false", t.median_us, t.p90_us,
                    chunk_median_ms(reader));
        first = false;
    }
    // (c) the row cache (default size): decode steps, a share of which repeats an earlier step's rows
    std::printf("\n  ],\n  \"row_cache\": [");
    first = true;
    for (double share : o.repeat) {
        PleReader reader(o.file, table_offset, o.row_bytes, 32, true);
        std::vector<std::vector<uint64_t>> seen;
        step_us.clear();
        std::uniform_real_distribution<double> u(0, 1);
        for (int s = 0; s < o.steps; ++s) {
            seen.push_back(!seen.empty() && u(rng) < share ? seen[rng() % seen.size()] : draw(16));
            const auto t0 = Clock::now();
            reader.begin(seen.back().data(), seen.back().size());
            reader.wait();
            step_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        }
        const Timing t = summarize(step_us);
        const double new_rows_ms = chunk_median_ms(reader);   // new rows: every look-up misses, every row is added
        const PleReader::Stats st = reader.stats();
        std::printf("%s\n    {\"repeat_share\": %.2f, \"cache_rows\": %zu, \"steps_every_row_cached\": %lld, "
                    "\"step_us_mean\": %.1f, \"step_us_median\": %.1f, \"step_us_p90\": %.1f, "
                    "\"new_rows_chunk_ms_median\": %.1f}",
                    first ? "" : ",", share, reader.cache_rows(), (long long)st.batches_cached, t.mean_us, t.median_us,
                    t.p90_us, new_rows_ms);
        first = false;
    }
    std::printf("\n  ]\n}\n");
    return 0;
}
