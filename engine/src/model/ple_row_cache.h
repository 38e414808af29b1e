// Rows of the PLE table kept in RAM by row index, so that an n-gram seen before in the session (in the prompt, in
// earlier output, in an earlier request) costs no disk read. A decode step waits for its 16 rows at the PLE layer
// (layer 1 of the published files: only layer 0 runs meanwhile); when all 16 are here it does not wait at all. Text
// derived from the prompt (an agent rewriting a file it was shown) repeats 88-100% of its trigrams, free prose
// 15-30% (bench/results/2026-12-05-vm-ple-cache/). Bounded: CLOCK eviction (a row found since the hand last passed
// it gets another round); memory grows with use up to the capacity. Used by one thread (PleReader's caller).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace strata {

class PleRowCache {
public:
    // At most capacity_rows rows of row_bytes each (0: the cache holds nothing).
    PleRowCache(size_t row_bytes, size_t capacity_rows);

    // The row's bytes (valid until the next insert), marked as used; null when it is not here.
    const uint8_t* find(uint64_t row);
    // Adds a row (once: a row already here keeps its slot), evicting one when full.
    void insert(uint64_t row, const uint8_t* bytes);

    size_t size() const { return used_; }
    size_t capacity() const { return cap_; }
    // The rows a cache of `bytes` holds at this row size, counting its index (~17 bytes a row besides the row).
    static size_t rows_for_bytes(size_t bytes, size_t row_bytes);

private:
    static constexpr uint32_t kEmpty = 0xffffffffu;
    size_t probe_start(uint64_t row) const;
    size_t locate(uint64_t row) const;   // the index entry holding row, or the empty entry where it would go
    void erase_entry(size_t i);          // backward-shift deletion (linear probing stays gap-free)
    void grow_index();

    size_t row_bytes_, cap_, used_ = 0, hand_ = 0;
    std::vector<uint64_t> keys_;           // by slot
    std::vector<uint8_t> referenced_;      // by slot: found since the hand last passed
    std::unique_ptr<uint8_t[]> bytes_;     // slot s at s · row_bytes (allocated in steps as slots are taken)
    size_t bytes_slots_ = 0;               // slots bytes_ has room for
    std::vector<uint32_t> index_;          // open addressing by row: a slot or kEmpty; size a power of two
};

}  // namespace strata
