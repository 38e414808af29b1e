// PleReader: distinct rows claimed from an atomic counter by the I/O threads and by the caller in wait(); each
// unbuffered read covers the row's aligned span (one or two 4 KiB blocks) through a per-thread aligned buffer.
#include "model/ple_reader.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "common/error.h"

namespace strata {

namespace {
constexpr uint64_t kAlign = platform::kUnbufferedAlign;
constexpr int kDefaultThreads = 32;   // a prompt chunk's reads at an SSD's useful queue depth (bench/ple_read)

int threads_from_env(int asked) {
    if (asked >= 0) return asked;
    if (const char* v = std::getenv("STRATA_PLE_IO_THREADS")) return std::clamp(std::atoi(v), 0, 256);
    return kDefaultThreads;
}

int64_t cache_bytes_from_env(int64_t asked) {
    if (asked >= 0) return asked;
    int64_t mib = kDefaultPleCacheMiB;
    if (const char* v = std::getenv("STRATA_PLE_CACHE_MIB")) mib = std::clamp<int64_t>(std::atoll(v), 0, 1 << 20);
    return mib << 20;
}
}  // namespace

PleReader::PleReader(const std::string& path, uint64_t table_offset, size_t row_bytes, int io_threads,
                     bool unbuffered, int64_t cache_bytes)
    : path_(path), table_offset_(table_offset), row_bytes_(row_bytes), cache_(row_bytes, 0) {
    STRATA_CHECK(row_bytes > 0, "PLE table ", path, ": rows of 0 bytes");
    buffered_ = platform::open_read_only(path);
    if (!buffered_.is_open()) fail(path, ": cannot open the PLE table: ", platform::last_error_text());
    file_size_ = platform::file_size(buffered_);
    const size_t file_rows = file_size_ > (int64_t)table_offset ? (size_t)((file_size_ - table_offset) / row_bytes) : 0;
    cache_ = PleRowCache(row_bytes, std::min(file_rows, PleRowCache::rows_for_bytes(
                                                            (size_t)cache_bytes_from_env(cache_bytes), row_bytes)));
    bounce_bytes_ = (row_bytes + 2 * kAlign - 1) / kAlign * kAlign;   // the span of a row at any offset
    caller_bounce_ = static_cast<uint8_t*>(platform::aligned_alloc_bytes(kAlign, bounce_bytes_));
    if (!caller_bounce_) fail("PLE reader: out of memory");
    if (unbuffered) {
        direct_file_ = platform::open_read_only_unbuffered(path);
        // Some file systems open with O_DIRECT and then refuse the reads: one probe read decides.
        if (direct_file_.is_open() && file_size_ >= (int64_t)kAlign &&
            platform::read_at(direct_file_, caller_bounce_, kAlign, table_offset / kAlign * kAlign) == (int64_t)kAlign)
            direct_ = true;
        else
            platform::close_file(direct_file_);
    }
    const int n = threads_from_env(io_threads);
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { worker(); });
}

PleReader::~PleReader() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        quit_ = true;
    }
    start_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    platform::close_file(direct_file_);
    platform::close_file(buffered_);
    platform::aligned_free(caller_bounce_);
}

void PleReader::begin(const uint64_t* rows, size_t n) {
    if (in_flight_) finish_batch();   // a batch nobody waited for (its pass failed): finished, dropped
    // A thread that woke late for the last batch may still be inside read_claimed (finding nothing left): the batch
    // changes only once none is, and a thread enters only under mu_.
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return active_ == 0; });
    std::vector<std::pair<uint64_t, uint32_t>> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = {rows[i], (uint32_t)i};
    std::sort(order.begin(), order.end());
    distinct_.clear();
    slot_.assign(n, 0);
    for (const auto& [row, i] : order) {
        if (distinct_.empty() || distinct_.back() != row) distinct_.push_back(row);
        slot_[i] = (uint32_t)(distinct_.size() - 1);
    }
    distinct_bytes_.resize(distinct_.size() * row_bytes_);
    out_.resize(n * row_bytes_);
    to_read_.clear();
    for (size_t j = 0; j < distinct_.size(); ++j) {
        if (const uint8_t* row = cache_.find(distinct_[j])) std::memcpy(distinct_bytes_.data() + j * row_bytes_, row, row_bytes_);
        else to_read_.push_back((uint32_t)j);
    }
    next_.store(0);
    done_.store(0);
    failed_.store(false);
    error_.clear();
    ++generation_;
    in_flight_ = true;
    ++stats_.batches;
    stats_.rows += (int64_t)n;
    stats_.reads += (int64_t)to_read_.size();
    stats_.cached += (int64_t)(distinct_.size() - to_read_.size());
    if (to_read_.empty()) ++stats_.batches_cached;
    // As many threads as there are rows (a decode step's 16 should not wake all of them); a thread that was not
    // asleep yet takes part as well.
    const size_t wake = std::min(to_read_.size(), threads_.size());
    if (wake == 0) return;
    if (wake == threads_.size()) start_cv_.notify_all();
    else
        for (size_t i = 0; i < wake; ++i) start_cv_.notify_one();
}

const uint8_t* PleReader::wait() {
    STRATA_CHECK(in_flight_, "PLE reader: wait without begin");
    const auto t0 = std::chrono::steady_clock::now();
    finish_batch();
    stats_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (failed_.load()) fail(error_);
    for (uint32_t j : to_read_) cache_.insert(distinct_[j], distinct_bytes_.data() + (size_t)j * row_bytes_);
    for (size_t i = 0; i < slot_.size(); ++i)
        std::memcpy(out_.data() + i * row_bytes_, distinct_bytes_.data() + (size_t)slot_[i] * row_bytes_, row_bytes_);
    return out_.data();
}

void PleReader::finish_batch() {
    read_claimed(caller_bounce_);
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return done_.load() >= to_read_.size() && active_ == 0; });
    in_flight_ = false;
}

void PleReader::worker() {
    uint8_t* bounce = static_cast<uint8_t*>(platform::aligned_alloc_bytes(kAlign, bounce_bytes_));
    uint64_t seen = 0;
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mu_);
            start_cv_.wait(lock, [&] { return quit_ || generation_ != seen; });
            if (quit_) break;
            seen = generation_;
            ++active_;
        }
        if (bounce) read_claimed(bounce);   // without a buffer (out of memory) it leaves the batch to the others
        {
            std::lock_guard<std::mutex> lock(mu_);
            --active_;
        }
        done_cv_.notify_all();
    }
    platform::aligned_free(bounce);
}

void PleReader::read_claimed(uint8_t* bounce) {
    const size_t total = to_read_.size();
    for (;;) {
        const size_t k = next_.fetch_add(1);
        if (k >= total) return;
        const size_t j = to_read_[k];
        if (!read_row(distinct_[j], distinct_bytes_.data() + j * row_bytes_, bounce)) {
            std::lock_guard<std::mutex> lock(mu_);
            if (!failed_.exchange(true))
                error_ = path_ + ": read of PLE table row " + std::to_string(distinct_[j]) + " at byte " +
                         std::to_string(table_offset_ + distinct_[j] * row_bytes_) + " failed: " +
                         platform::last_error_text();
        }
        done_.fetch_add(1);
    }
}

bool PleReader::read_row(uint64_t row, uint8_t* dst, uint8_t* bounce) {
    const uint64_t off = table_offset_ + row * row_bytes_;
    const uint64_t a0 = off / kAlign * kAlign, span = (off + row_bytes_ - a0 + kAlign - 1) / kAlign * kAlign;
    // Unbuffered where the aligned span lies inside the file (a short read at the end of the file cannot be
    // continued at an unaligned offset); through the cache otherwise, or if the unbuffered read fails.
    if (direct_ && (int64_t)(a0 + span) <= file_size_ &&
        platform::read_at(direct_file_, bounce, span, a0) == (int64_t)span) {
        std::memcpy(dst, bounce + (off - a0), row_bytes_);
        return true;
    }
    return platform::read_at(buffered_, dst, row_bytes_, off) == (int64_t)row_bytes_;
}

}  // namespace strata
