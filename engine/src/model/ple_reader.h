// Rows of the PLE n-gram table (MODEL.md §6; 16 rows a token from a [160 × 320M] table that stays on the SSD, 28.8 GB
// at IQ4_NL: PRODUCT.md) read without the OS's file cache and many at once. begin() hands a pass's rows to a few I/O
// threads and returns, so the reads run while the backend works on the layers before the PLE layer; wait() gives
// them. A decode step's 16 reads then cost about one read's latency instead of 16 in a row, and a 1,024-token prompt
// chunk's ~16,000 are spread over the threads. Unbuffered reads (O_DIRECT / FILE_FLAG_NO_BUFFERING) keep the table
// out of the RAM the pinned experts need; where the file system refuses them the reads go through the cache. Rows
// read once are kept in a bounded PleRowCache (256 MiB by default), so an n-gram seen before is not read again.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/platform.h"
#include "model/ple_row_cache.h"

namespace strata {

// PLE tables from this size on are read unbuffered by default (Qwen4Exp); smaller ones stay in the page cache.
constexpr uint64_t kUnbufferedPleBytes = uint64_t(1) << 30;
// The row cache's default size (STRATA_PLE_CACHE_MIB): ~2.8 million 90-byte IQ4_NL rows, the 16 rows a token of
// ~170,000 tokens.
constexpr int64_t kDefaultPleCacheMiB = 256;

class PleReader {
public:
    // Row r of the table is row_bytes bytes at file offset table_offset + r · row_bytes of `path`. io_threads: the
    // reading threads besides the caller (−1: STRATA_PLE_IO_THREADS, else 32); unbuffered false: through the cache;
    // cache_bytes: the row cache's size (−1: STRATA_PLE_CACHE_MIB, else kDefaultPleCacheMiB; 0: no row cache).
    PleReader(const std::string& path, uint64_t table_offset, size_t row_bytes, int io_threads = -1,
              bool unbuffered = true, int64_t cache_bytes = -1);
    ~PleReader();
    PleReader(const PleReader&) = delete;
    PleReader& operator=(const PleReader&) = delete;

    // Starts reading rows[0 … n) (a row asked for twice is read once; a row in the row cache is not read). A batch
    // begun earlier and not waited for is finished and dropped first.
    void begin(const uint64_t* rows, size_t n);
    // The batch's bytes, row i of the request at i · row_bytes (valid until the next begin); the calling thread reads
    // along until none are left. Throws, naming the file and the offset, when a read failed.
    const uint8_t* wait();

    bool unbuffered() const { return direct_; }
    size_t row_bytes() const { return row_bytes_; }
    int io_threads() const { return (int)threads_.size(); }
    size_t cache_rows() const { return cache_.capacity(); }
    struct Stats {
        int64_t batches = 0, rows = 0, reads = 0;   // reads: distinct rows read from the file
        int64_t cached = 0;                         // distinct rows found in the row cache
        int64_t batches_cached = 0;                 // batches with every row in the row cache (nothing to wait for)
        double wait_s = 0;                          // time spent in wait()
    };
    Stats stats() const { return stats_; }

private:
    void worker();
    void read_claimed(uint8_t* bounce);    // claims distinct rows until none are left, reads each
    bool read_row(uint64_t row, uint8_t* dst, uint8_t* bounce);
    void finish_batch();                    // the caller's share, then waits for the threads' reads

    std::string path_;
    platform::FileHandle buffered_;         // always open: rows whose aligned span passes the end of the file
    platform::FileHandle direct_file_;      // unbuffered, when the file system takes it
    bool direct_ = false;
    int64_t file_size_ = 0;
    uint64_t table_offset_;
    size_t row_bytes_, bounce_bytes_ = 0;
    uint8_t* caller_bounce_ = nullptr;

    // The batch: distinct rows (sorted), where each request's row is among them, and those to read (not cached).
    std::vector<uint64_t> distinct_;
    std::vector<uint32_t> slot_, to_read_;
    std::vector<uint8_t> distinct_bytes_, out_;
    bool in_flight_ = false;
    std::atomic<size_t> next_{0};           // the next of to_read_ to claim
    std::atomic<size_t> done_{0};           // rows of to_read_ read (or failed)
    std::atomic<bool> failed_{false};
    std::string error_;                     // the first failure (under mu_)

    std::vector<std::thread> threads_;
    std::mutex mu_;
    std::condition_variable start_cv_, done_cv_;
    uint64_t generation_ = 0;               // bumped by begin (under mu_)
    int active_ = 0;                        // threads inside read_claimed (under mu_)
    bool quit_ = false;
    PleRowCache cache_;                     // the caller's thread only (begin, wait)
    Stats stats_;
};

}  // namespace strata
