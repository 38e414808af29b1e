// PleReader (model/ple_reader.h) on a real file: rows of an odd size at an unaligned table offset, read unbuffered
// (O_DIRECT where the file system takes it) and buffered, by 0, 1 and 8 I/O threads: every byte as written, rows
// asked twice, the table's last row (whose aligned span passes the end of the file), a batch never waited for,
// hundreds of batches back to back (the threads' hand-over), rows found in the row cache, a reader without one, and a
// row past the file (an error naming the file).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "common/error.h"
#include "model/ple_reader.h"

using namespace strata;

namespace {

constexpr uint64_t kOffset = 1000;   // table start: not a multiple of 4096
constexpr size_t kRowBytes = 110;    // a Q5_0 row of 160 values
constexpr uint64_t kRows = 40000;    // 4.4 MB

uint8_t byte_of(uint64_t row, size_t k) { return (uint8_t)((row * 2654435761u + k * 40503u) >> 7); }

std::string write_table() {
    const std::string path = (std::filesystem::temp_directory_path() / "strata_test_ple_reader.bin").string();
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    std::vector<uint8_t> head(kOffset, 0xAB);
    f.write((const char*)head.data(), (std::streamsize)head.size());
    std::vector<uint8_t> row(kRowBytes);
    for (uint64_t r = 0; r < kRows; ++r) {
        for (size_t k = 0; k < kRowBytes; ++k) row[k] = byte_of(r, k);
        f.write((const char*)row.data(), (std::streamsize)row.size());
    }
    return path;
}

bool rows_match(const uint8_t* got, const std::vector<uint64_t>& rows) {
    for (size_t i = 0; i < rows.size(); ++i)
        for (size_t k = 0; k < kRowBytes; ++k)
            if (got[i * kRowBytes + k] != byte_of(rows[i], k)) return false;
    return true;
}

}  // namespace

int main() {
    const std::string path = write_table();
    std::mt19937_64 rng(7);
    for (bool unbuffered : {true, false})
        for (int threads : {0, 1, 8}) {
            PleReader reader(path, kOffset, kRowBytes, threads, unbuffered);
            const std::string tag = std::string(unbuffered ? "unbuffered" : "buffered") + " (" +
                                    (reader.unbuffered() ? "direct" : "cached") + "), " + std::to_string(threads) +
                                    " threads";
            if (unbuffered) std::printf("reads %s\n", reader.unbuffered() ? "bypass the page cache" : "go through the cache");
            // the row cache (a new reader's): a decode step's rows asked again are not read again, and come back with their bytes
            {
                const PleReader::Stats before = reader.stats();
                std::vector<uint64_t> step = {11, 12, 13, 11, 40, 39998};
                reader.begin(step.data(), step.size());
                CHECK_MSG(rows_match(reader.wait(), step), "%s", ("a step's rows, " + tag).c_str());
                step = {39998, 13, 12, 11, 40, 40};
                reader.begin(step.data(), step.size());
                CHECK_MSG(rows_match(reader.wait(), step), "%s", ("the same rows from the cache, " + tag).c_str());
                step = {40, 41};   // one cached, one not
                reader.begin(step.data(), step.size());
                CHECK_MSG(rows_match(reader.wait(), step), "%s", ("a cached and a new row, " + tag).c_str());
                const PleReader::Stats after = reader.stats();
                CHECK_MSG(after.batches_cached - before.batches_cached == 1 && after.cached - before.cached >= 6 &&
                              after.reads - before.reads <= 6,
                          "%s", ("the second step read nothing, " + tag).c_str());
            }
            // a decode step: 16 rows, two of them twice, the first and the last row of the table
            std::vector<uint64_t> rows = {5, 0, kRows - 1, 17, 5, 39999, 123, 4096, 4097, 2, 77, 17, 31000, 9, 8, 1};
            reader.begin(rows.data(), rows.size());
            CHECK_MSG(rows_match(reader.wait(), rows), "%s", ("16 rows, " + tag).c_str());
            // a prompt chunk: 16,384 random rows
            rows.resize(16384);
            for (uint64_t& r : rows) r = rng() % kRows;
            reader.begin(rows.data(), rows.size());
            CHECK_MSG(rows_match(reader.wait(), rows), "%s", ("16,384 rows, " + tag).c_str());
            // a batch nobody waits for (its pass threw), then the next
            reader.begin(rows.data(), 100);
            std::vector<uint64_t> next = {3, 2, 1};
            reader.begin(next.data(), next.size());
            CHECK_MSG(rows_match(reader.wait(), next), "%s", ("after a dropped batch, " + tag).c_str());
            // batches back to back, 1 to 64 rows each
            bool all = true;
            for (int b = 0; b < 300 && all; ++b) {
                std::vector<uint64_t> batch(1 + rng() % 64);
                for (uint64_t& r : batch) r = rng() % kRows;
                reader.begin(batch.data(), batch.size());
                all = rows_match(reader.wait(), batch);
            }
            CHECK_MSG(all, "%s", ("300 batches, " + tag).c_str());
            const PleReader::Stats st = reader.stats();
            CHECK_MSG(st.batches == 307 && st.reads + st.cached <= st.rows && st.cached > 0, "%s",
                      ("stats of " + tag).c_str());
            // a row past the end of the file
            std::vector<uint64_t> bad = {1, kRows + 100};
            reader.begin(bad.data(), bad.size());
            bool threw = false;
            try {
                reader.wait();
            } catch (const Error& e) {
                threw = std::string(e.what()).find(path) != std::string::npos;
            }
            CHECK_MSG(threw, "%s", ("a row past the file fails naming it, " + tag).c_str());
            reader.begin(next.data(), next.size());
            CHECK_MSG(rows_match(reader.wait(), next), "%s", ("a batch after a failed one, " + tag).c_str());
        }
    {   // without a row cache (cache_bytes 0) every batch is read
        PleReader reader(path, kOffset, kRowBytes, 2, true, 0);
        std::vector<uint64_t> step = {7, 8, 7};
        for (int i = 0; i < 3; ++i) {
            reader.begin(step.data(), step.size());
            CHECK_MSG(rows_match(reader.wait(), step), "no row cache: step %d", i);
        }
        const PleReader::Stats st = reader.stats();
        CHECK_MSG(reader.cache_rows() == 0 && st.reads == 6 && st.cached == 0 && st.batches_cached == 0,
                  "no row cache: 3 steps read 2 rows each (%lld reads)", (long long)st.reads);
    }
    std::remove(path.c_str());
    return test::exit_code();
}
